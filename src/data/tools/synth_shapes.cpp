// The synthetic shapes dataset (see synth_shapes.h): layout by rejection sampling, supersampled rendering,
// caption and VQA generation, shard writing.
#include "data/tools/synth_shapes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "data/io/tar.h"

namespace vlm {
namespace {

constexpr double kMinSize = 0.34, kMaxSize = 0.44;  // fraction of the side (see the header)
constexpr double kBorder = 0.03;                     // bounding box to image edge
constexpr double kGap = 0.04;                        // between bounding boxes
constexpr double kMinDx = 0.12;                      // between centres, in x
constexpr int kPlaceTries = 100;                     // per object, before the layout restarts
constexpr int kSuper = 4;                            // 4x4 samples per pixel for antialiased edges

const char* const kCountWords[] = {"zero", "one", "two", "three"};

double uniform(Philox& rng, double lo, double hi) { return lo + (hi - lo) * rng.uniform(); }

struct Layout {
  std::vector<ShapeObject> objects;  // in unit coordinates
};

bool fits(const ShapeObject& a, const std::vector<ShapeObject>& placed) {
  for (const auto& b : placed) {
    const double dx = std::fabs(a.x - b.x), dy = std::fabs(a.y - b.y);
    if (dx < kMinDx) return false;
    const double need = (a.size + b.size) / 2 + kGap;
    if (dx < need && dy < need) return false;
  }
  return true;
}

Layout draw_layout(Philox& rng) {
  const int n = 1 + static_cast<int>(rng.uniform_int(3));
  // n distinct (colour, shape) pairs out of the 15.
  std::vector<int> combos(kNumShapeKinds * kNumShapeColors);
  for (size_t i = 0; i < combos.size(); ++i) combos[i] = static_cast<int>(i);
  for (int i = 0; i < n; ++i) std::swap(combos[i], combos[i + rng.uniform_int(combos.size() - i)]);
  for (int restart = 0;; ++restart) {
    VLM_CHECK(restart < 100000, "synth shapes: no layout found for ", n, " objects");
    Layout layout;
    bool ok = true;
    for (int i = 0; i < n && ok; ++i) {
      ShapeObject o;
      o.color = static_cast<ShapeColor>(combos[i] / kNumShapeKinds);
      o.shape = static_cast<ShapeKind>(combos[i] % kNumShapeKinds);
      o.size = uniform(rng, kMinSize, kMaxSize);
      const double lo = kBorder + o.size / 2, hi = 1.0 - kBorder - o.size / 2;
      ok = false;
      for (int t = 0; t < kPlaceTries && !ok; ++t) {
        o.x = uniform(rng, lo, hi);
        o.y = uniform(rng, lo, hi);
        ok = fits(o, layout.objects);
      }
      if (ok) layout.objects.push_back(o);
    }
    if (ok) return layout;
  }
}

bool inside(const ShapeObject& o, double px, double py) {
  const double h = o.size / 2, dx = px - o.x, dy = py - o.y;
  switch (o.shape) {
    case ShapeKind::circle: return dx * dx + dy * dy <= h * h;
    case ShapeKind::square: return std::fabs(dx) <= h && std::fabs(dy) <= h;
    case ShapeKind::triangle:  // apex up, base at the bottom of the box
      return dy <= h && dy >= -h && std::fabs(dx) <= (dy + h) / 2;
  }
  return false;
}

void render(const std::vector<ShapeObject>& objects, const uint8_t bg[3], Image& img) {
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) std::copy_n(bg, 3, img.pixel(x, y));
  for (const auto& o : objects) {
    uint8_t rgb[3];
    shape_color_rgb(o.color, rgb);
    const int x0 = std::max(0, static_cast<int>(std::floor(o.x - o.size / 2)) - 1);
    const int x1 = std::min(img.width - 1, static_cast<int>(std::ceil(o.x + o.size / 2)) + 1);
    const int y0 = std::max(0, static_cast<int>(std::floor(o.y - o.size / 2)) - 1);
    const int y1 = std::min(img.height - 1, static_cast<int>(std::ceil(o.y + o.size / 2)) + 1);
    for (int y = y0; y <= y1; ++y) {
      for (int x = x0; x <= x1; ++x) {
        int hits = 0;
        for (int sy = 0; sy < kSuper; ++sy)
          for (int sx = 0; sx < kSuper; ++sx)
            hits += inside(o, x + (sx + 0.5) / kSuper, y + (sy + 0.5) / kSuper);
        if (!hits) continue;
        uint8_t* p = img.pixel(x, y);
        const int total = kSuper * kSuper;
        for (int c = 0; c < 3; ++c)
          p[c] = static_cast<uint8_t>((p[c] * (total - hits) + rgb[c] * hits + total / 2) / total);
      }
    }
  }
}

std::string object_phrase(const ShapeObject& o) {
  return str(shape_color_name(o.color), " ", shape_kind_name(o.shape));
}

}  // namespace

const char* shape_kind_name(ShapeKind kind) {
  switch (kind) {
    case ShapeKind::circle: return "circle";
    case ShapeKind::square: return "square";
    case ShapeKind::triangle: return "triangle";
  }
  return "?";
}

const char* shape_color_name(ShapeColor color) {
  switch (color) {
    case ShapeColor::red: return "red";
    case ShapeColor::green: return "green";
    case ShapeColor::blue: return "blue";
    case ShapeColor::yellow: return "yellow";
    case ShapeColor::purple: return "purple";
  }
  return "?";
}

void shape_color_rgb(ShapeColor color, uint8_t rgb[3]) {
  static const uint8_t kRgb[kNumShapeColors][3] = {
      {220, 40, 40}, {40, 170, 60}, {40, 80, 220}, {230, 200, 30}, {150, 60, 190}};
  std::copy_n(kRgb[static_cast<int>(color)], 3, rgb);
}

std::string synth_shapes_key(uint64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%09llu", static_cast<unsigned long long>(index));
  return buf;
}

std::string synth_shapes_caption(const std::vector<ShapeObject>& objects) {
  std::string caption;
  for (size_t i = 0; i < objects.size(); ++i) {
    if (i > 0) caption += i + 1 == objects.size() ? " and " : ", ";
    caption += "a " + object_phrase(objects[i]);
  }
  return caption;
}

std::vector<QaPair> synth_shapes_qa(const std::vector<ShapeObject>& objects, Philox& rng) {
  std::vector<QaPair> qa;
  const size_t n = objects.size();
  VLM_CHECK(n >= 1 && n <= 3, "synth_shapes_qa: ", n, " objects");
  qa.push_back({"how many shapes are there?", kCountWords[n]});

  int kind_count[kNumShapeKinds] = {}, color_count[kNumShapeColors] = {};
  bool present[kNumShapeColors][kNumShapeKinds] = {};
  for (const auto& o : objects) {
    ++kind_count[static_cast<int>(o.shape)];
    ++color_count[static_cast<int>(o.color)];
    present[static_cast<int>(o.color)][static_cast<int>(o.shape)] = true;
  }
  for (int k = 0; k < kNumShapeKinds; ++k) {
    if (kind_count[k] != 1) continue;
    for (const auto& o : objects)
      if (static_cast<int>(o.shape) == k)
        qa.push_back({str("what color is the ", shape_kind_name(o.shape), "?"), shape_color_name(o.color)});
  }
  for (int c = 0; c < kNumShapeColors; ++c) {
    if (color_count[c] != 1) continue;
    for (const auto& o : objects)
      if (static_cast<int>(o.color) == c)
        qa.push_back({str("what shape is the ", shape_color_name(o.color), " object?"), shape_kind_name(o.shape)});
  }

  // One present and one absent (colour, shape) pair, asked in a random order so position gives nothing away.
  const ShapeObject& yes = objects[rng.uniform_int(n)];
  std::vector<int> absent;
  for (int c = 0; c < kNumShapeColors; ++c)
    for (int k = 0; k < kNumShapeKinds; ++k)
      if (!present[c][k]) absent.push_back(c * kNumShapeKinds + k);
  const int pick = absent[rng.uniform_int(absent.size())];
  QaPair yes_qa{str("is there a ", object_phrase(yes), "?"), "yes"};
  QaPair no_qa{str("is there a ", shape_color_name(static_cast<ShapeColor>(pick / kNumShapeKinds)), " ",
                   shape_kind_name(static_cast<ShapeKind>(pick % kNumShapeKinds)), "?"),
               "no"};
  if (rng.uniform_int(2)) std::swap(yes_qa, no_qa);
  qa.push_back(std::move(yes_qa));
  qa.push_back(std::move(no_qa));

  if (n >= 2) {
    const size_t i = rng.uniform_int(n);
    size_t j = rng.uniform_int(n - 1);
    if (j >= i) ++j;
    qa.push_back({str("is the ", object_phrase(objects[i]), " left of the ", object_phrase(objects[j]), "?"),
                  objects[i].x < objects[j].x ? "yes" : "no"});
    const auto leftmost = std::min_element(objects.begin(), objects.end(),
                                           [](const ShapeObject& a, const ShapeObject& b) { return a.x < b.x; });
    qa.push_back({"what is the leftmost shape?", object_phrase(*leftmost)});
  }
  return qa;
}

SynthShapesSample synth_shapes_sample(uint64_t seed, uint64_t index, int image_size) {
  VLM_CHECK(image_size >= 16, "synth_shapes_sample: image_size ", image_size, " < 16");
  Philox rng(seed, index);
  SynthShapesSample s;
  s.index = index;
  s.key = synth_shapes_key(index);
  uint8_t bg[3];
  for (auto& c : bg) c = static_cast<uint8_t>(225 + rng.uniform_int(31));
  Layout layout = draw_layout(rng);
  std::sort(layout.objects.begin(), layout.objects.end(),
            [](const ShapeObject& a, const ShapeObject& b) { return a.x < b.x; });
  for (auto o : layout.objects) {
    o.x *= image_size;
    o.y *= image_size;
    o.size *= image_size;
    s.objects.push_back(o);
  }
  s.image = Image(image_size, image_size);
  render(s.objects, bg, s.image);
  s.caption = synth_shapes_caption(s.objects);
  s.qa = synth_shapes_qa(s.objects, rng);
  return s;
}

std::string SynthShapesSample::json() const {
  auto round2 = [](double v) { return std::round(v * 100.0) / 100.0; };
  nlohmann::ordered_json j;  // keys in the documented order
  j["caption"] = caption;
  j["objects"] = nlohmann::ordered_json::array();
  for (const auto& o : objects)
    j["objects"].push_back(nlohmann::ordered_json{{"shape", shape_kind_name(o.shape)},
                            {"color", shape_color_name(o.color)},
                            {"x", round2(o.x)},
                            {"y", round2(o.y)},
                            {"size", round2(o.size)}});
  j["qa"] = nlohmann::ordered_json::array();
  for (const auto& p : qa) j["qa"].push_back(nlohmann::ordered_json{{"question", p.question}, {"answer", p.answer}});
  return j.dump();
}

Status SynthShapesOptions::validate() const {
  if (out_dir.empty()) return invalid_argument("synth_shapes.out_dir: empty");
  if (samples == 0) return invalid_argument("synth_shapes.samples: must be > 0");
  if (image_size < 16 || image_size > 4096)
    return invalid_argument(str("synth_shapes.image_size: ", image_size, " not in 16..4096"));
  if (samples_per_shard == 0) return invalid_argument("synth_shapes.samples_per_shard: must be > 0");
  if (jpeg_quality < 1 || jpeg_quality > 100)
    return invalid_argument(str("synth_shapes.jpeg_quality: ", jpeg_quality, " not in 1..100"));
  if (prefix.empty() || prefix.find('/') != std::string::npos)
    return invalid_argument(str("synth_shapes.prefix: '", prefix, "' must be a non-empty file name"));
  return Status();
}

Status synth_shapes_write(const SynthShapesOptions& o) {
  VLM_RETURN_IF_ERROR(o.validate());
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) return io_error(str(o.out_dir, ": cannot create directory: ", ec.message()));
  const uint64_t n_shards = (o.samples + o.samples_per_shard - 1) / o.samples_per_shard;
  for (uint64_t shard = 0; shard < n_shards; ++shard) {
    const uint64_t begin = shard * o.samples_per_shard;
    const uint64_t count = std::min(o.samples_per_shard, o.samples - begin);
    // Render and encode in parallel, write in order.
    std::vector<std::string> jsons(count), captions(count);
    std::vector<std::vector<uint8_t>> jpegs(count);
    std::vector<Status> errors(count);
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) {
      SynthShapesSample s = synth_shapes_sample(o.seed, o.first_index + begin + static_cast<uint64_t>(i), o.image_size);
      auto jpeg = encode_jpeg(s.image, o.jpeg_quality, ChromaSubsampling::s444);
      if (!jpeg.ok()) {
        errors[static_cast<size_t>(i)] = jpeg.status();
        continue;
      }
      jpegs[static_cast<size_t>(i)] = std::move(jpeg).value();
      jsons[static_cast<size_t>(i)] = s.json();
      captions[static_cast<size_t>(i)] = std::move(s.caption);
    }
    char name[64];
    std::snprintf(name, sizeof(name), "-%06llu.tar", static_cast<unsigned long long>(shard));
    const std::string path = (std::filesystem::path(o.out_dir) / (o.prefix + name)).string();
    VLM_ASSIGN_OR_RETURN(auto writer, TarWriter::create(path));
    for (uint64_t i = 0; i < count; ++i) {
      VLM_RETURN_IF_ERROR(errors[i]);
      const std::string key = synth_shapes_key(o.first_index + begin + i);
      VLM_RETURN_IF_ERROR(writer->add(key + ".jpg", jpegs[i]));
      VLM_RETURN_IF_ERROR(writer->add(key + ".json", std::string_view(jsons[i])));
      VLM_RETURN_IF_ERROR(writer->add(key + ".txt", std::string_view(captions[i])));
    }
    VLM_RETURN_IF_ERROR(writer->close());
  }
  char next[64];
  std::snprintf(next, sizeof(next), "-%06llu.tar", static_cast<unsigned long long>(n_shards));
  const auto stale = std::filesystem::path(o.out_dir) / (o.prefix + next);
  if (std::filesystem::exists(stale, ec))
    VLM_WARN("synth_shapes: ", stale.string(), " is left from an earlier, larger run; a directory spec would read it");
  return Status();
}

}  // namespace vlm
