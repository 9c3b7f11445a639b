// The synthetic shapes dataset: determinism, layout rules, answers consistent with the objects, shard output.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "data/io/webdataset.h"
#include "data/tools/synth_shapes.h"
#include "data_test_util.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

std::string phrase(const ShapeObject& o) { return str(shape_color_name(o.color), " ", shape_kind_name(o.shape)); }

// Recomputes every answer from the objects and checks the generated QA against it.
void check_qa(const SynthShapesSample& s) {
  const auto& objs = s.objects;
  const size_t n = objs.size();
  std::map<std::string, int> kind_count, color_count;
  for (const auto& o : objs) {
    ++kind_count[shape_kind_name(o.shape)];
    ++color_count[shape_color_name(o.color)];
  }
  const char* count_words[] = {"", "one", "two", "three"};
  int n_count = 0, n_color = 0, n_shape = 0, n_yes = 0, n_no = 0, n_left = 0, n_leftmost = 0;
  for (const auto& qa : s.qa) {
    const std::string& q = qa.question;
    const std::string& a = qa.answer;
    for (char c : q + a) ASSERT_FALSE(c >= 'A' && c <= 'Z') << q;
    ASSERT_LE(std::count(a.begin(), a.end(), ' '), 1) << a;
    if (q == "how many shapes are there?") {
      ++n_count;
      EXPECT_EQ(a, count_words[n]);
    } else if (q.rfind("what color is the ", 0) == 0) {
      ++n_color;
      const std::string kind = q.substr(18, q.size() - 19);
      ASSERT_EQ(kind_count[kind], 1) << q;
      for (const auto& o : objs)
        if (kind == shape_kind_name(o.shape)) {
          EXPECT_EQ(a, shape_color_name(o.color));
        }
    } else if (q.rfind("what shape is the ", 0) == 0) {
      ++n_shape;
      const std::string color = q.substr(18, q.find(" object?") - 18);
      ASSERT_EQ(color_count[color], 1) << q;
      for (const auto& o : objs)
        if (color == shape_color_name(o.color)) {
          EXPECT_EQ(a, shape_kind_name(o.shape));
        }
    } else if (q.rfind("is there a ", 0) == 0) {
      const std::string what = q.substr(11, q.size() - 12);
      bool present = false;
      for (const auto& o : objs) present |= phrase(o) == what;
      EXPECT_EQ(a, present ? "yes" : "no") << q;
      (present ? n_yes : n_no)++;
    } else if (q.rfind("is the ", 0) == 0) {
      ++n_left;
      const size_t mid = q.find(" left of the ");
      ASSERT_NE(mid, std::string::npos);
      const std::string first = q.substr(7, mid - 7), second = q.substr(mid + 13, q.size() - mid - 14);
      const ShapeObject *p = nullptr, *r = nullptr;
      for (const auto& o : objs) {
        if (phrase(o) == first) p = &o;
        if (phrase(o) == second) r = &o;
      }
      ASSERT_TRUE(p && r && p != r) << q;
      EXPECT_EQ(a, p->x < r->x ? "yes" : "no") << q;
    } else if (q == "what is the leftmost shape?") {
      ++n_leftmost;
      EXPECT_EQ(a, phrase(objs.front()));
    } else {
      ADD_FAILURE() << "unexpected question: " << q;
    }
  }
  EXPECT_EQ(n_count, 1);
  int unique_kinds = 0, unique_colors = 0;
  for (auto& [k, c] : kind_count) unique_kinds += c == 1;
  for (auto& [k, c] : color_count) unique_colors += c == 1;
  EXPECT_EQ(n_color, unique_kinds);
  EXPECT_EQ(n_shape, unique_colors);
  EXPECT_EQ(n_yes, 1);
  EXPECT_EQ(n_no, 1);
  EXPECT_EQ(n_left, n >= 2 ? 1 : 0);
  EXPECT_EQ(n_leftmost, n >= 2 ? 1 : 0);
}

TEST(SynthShapes, Deterministic) {
  SynthShapesSample a = synth_shapes_sample(7, 5), b = synth_shapes_sample(7, 5);
  EXPECT_EQ(a.image.rgb, b.image.rgb);
  EXPECT_EQ(a.json(), b.json());
  EXPECT_EQ(a.key, "000000005");
  SynthShapesSample other_seed = synth_shapes_sample(8, 5), other_index = synth_shapes_sample(7, 6);
  EXPECT_NE(a.image.rgb, other_seed.image.rgb);
  EXPECT_NE(a.image.rgb, other_index.image.rgb);
  int differing_json = 0;
  for (uint64_t i = 0; i < 20; ++i)
    differing_json += synth_shapes_sample(1, i).json() != synth_shapes_sample(2, i).json();
  EXPECT_GE(differing_json, 18);
}

TEST(SynthShapes, LayoutDoesNotDependOnImageSize) {
  for (uint64_t i = 0; i < 20; ++i) {
    SynthShapesSample s64 = synth_shapes_sample(3, i, 64), s128 = synth_shapes_sample(3, i, 128);
    ASSERT_EQ(s64.objects.size(), s128.objects.size());
    EXPECT_EQ(s64.caption, s128.caption);
    for (size_t k = 0; k < s64.objects.size(); ++k) {
      EXPECT_NEAR(s64.objects[k].x * 2, s128.objects[k].x, 1e-9);
      EXPECT_NEAR(s64.objects[k].size * 2, s128.objects[k].size, 1e-9);
    }
  }
}

TEST(SynthShapes, LayoutRulesAndAnswers) {
  const int side = 64;
  std::map<int, int> count_hist;
  std::set<std::string> combos_seen;
  int left_yes = 0, left_total = 0;
  for (uint64_t i = 0; i < 3000; ++i) {
    SynthShapesSample s = synth_shapes_sample(11, i, side);
    SCOPED_TRACE(s.json());
    const auto& objs = s.objects;
    ASSERT_GE(objs.size(), 1u);
    ASSERT_LE(objs.size(), 3u);
    ++count_hist[static_cast<int>(objs.size())];
    std::set<std::string> distinct;
    for (size_t a = 0; a < objs.size(); ++a) {
      const auto& o = objs[a];
      distinct.insert(phrase(o));
      combos_seen.insert(phrase(o));
      EXPECT_GE(o.size, 0.34 * side - 1e-9);
      EXPECT_LE(o.size, 0.44 * side + 1e-9);
      EXPECT_GE(o.x - o.size / 2, 0.03 * side - 1e-9);
      EXPECT_LE(o.x + o.size / 2, 0.97 * side + 1e-9);
      EXPECT_GE(o.y - o.size / 2, 0.03 * side - 1e-9);
      EXPECT_LE(o.y + o.size / 2, 0.97 * side + 1e-9);
      if (a > 0) {
        EXPECT_LT(objs[a - 1].x, o.x) << "objects must be listed left to right";
      }
      for (size_t b = a + 1; b < objs.size(); ++b) {
        const double dx = std::fabs(o.x - objs[b].x), dy = std::fabs(o.y - objs[b].y);
        const double need = (o.size + objs[b].size) / 2 + 0.04 * side;
        EXPECT_GE(dx, 0.12 * side - 1e-9);
        EXPECT_TRUE(dx >= need - 1e-9 || dy >= need - 1e-9) << "bounding boxes overlap";
      }
      // The centre pixel shows the object's colour (JPEG is not involved here).
      uint8_t rgb[3];
      shape_color_rgb(o.color, rgb);
      const uint8_t* p = s.image.pixel(static_cast<int>(o.x), static_cast<int>(o.y));
      for (int c = 0; c < 3; ++c) EXPECT_EQ(p[c], rgb[c]);
    }
    EXPECT_EQ(distinct.size(), objs.size());
    // Corners are background: pale.
    for (int c = 0; c < 3; ++c) EXPECT_GE(s.image.pixel(0, 0)[c], 225);
    EXPECT_EQ(s.caption, synth_shapes_caption(objs));
    check_qa(s);
    for (const auto& qa : s.qa)
      if (qa.question.rfind("is the ", 0) == 0) {
        ++left_total;
        left_yes += qa.answer == "yes";
      }
  }
  for (int n = 1; n <= 3; ++n) EXPECT_GT(count_hist[n], 800) << n;
  EXPECT_EQ(combos_seen.size(), 15u);
  EXPECT_GT(left_yes, left_total * 0.4);
  EXPECT_LT(left_yes, left_total * 0.6);
}

TEST(SynthShapes, Captions) {
  ShapeObject a{ShapeKind::circle, ShapeColor::red, 10, 10, 16};
  ShapeObject b{ShapeKind::square, ShapeColor::blue, 30, 10, 16};
  ShapeObject c{ShapeKind::triangle, ShapeColor::green, 50, 10, 16};
  EXPECT_EQ(synth_shapes_caption({a}), "a red circle");
  EXPECT_EQ(synth_shapes_caption({a, b}), "a red circle and a blue square");
  EXPECT_EQ(synth_shapes_caption({a, b, c}), "a red circle, a blue square and a green triangle");
}

TEST(SynthShapes, WritesShards) {
  const std::string dir = testing::scratch_dir("synth_shapes");
  SynthShapesOptions o;
  o.out_dir = dir + "/out";
  o.samples = 25;
  o.samples_per_shard = 10;
  o.seed = 5;
  ASSERT_TRUE(synth_shapes_write(o).ok());
  for (int s = 0; s < 3; ++s) EXPECT_TRUE(std::filesystem::exists(str(o.out_dir, "/shapes-00000", s, ".tar")));
  EXPECT_FALSE(std::filesystem::exists(o.out_dir + "/shapes-000003.tar"));

  uint64_t index = 0;
  for (int s = 0; s < 3; ++s) {
    auto reader = WebDatasetReader::open(str(o.out_dir, "/shapes-00000", s, ".tar"));
    ASSERT_TRUE(reader.ok());
    WebDatasetSample sample;
    while (*(*reader)->next(sample)) {
      const SynthShapesSample expected = synth_shapes_sample(o.seed, index, o.image_size);
      EXPECT_EQ(sample.key, expected.key);
      ASSERT_EQ(sample.fields.size(), 3u);
      EXPECT_EQ(sample.text("txt"), expected.caption);
      EXPECT_EQ(sample.text("json"), expected.json());
      auto j = nlohmann::json::parse(sample.text("json"));
      EXPECT_EQ(j["caption"], expected.caption);
      EXPECT_EQ(j["objects"].size(), expected.objects.size());
      EXPECT_EQ(j["qa"].size(), expected.qa.size());
      auto img = decode_image(*sample.get("jpg"), "jpg");
      ASSERT_TRUE(img.ok()) << img.status().to_string();
      EXPECT_EQ(img->width, 64);
      EXPECT_LT(testing::mean_abs_diff(*img, expected.image), 3.0);
      ++index;
    }
  }
  EXPECT_EQ(index, 25u);

  SynthShapesOptions bad = o;
  bad.jpeg_quality = 0;
  EXPECT_NE(synth_shapes_write(bad).message().find("jpeg_quality"), std::string::npos);
  bad = o;
  bad.samples = 0;
  EXPECT_NE(synth_shapes_write(bad).message().find("samples"), std::string::npos);
}

}  // namespace
}  // namespace vlm
