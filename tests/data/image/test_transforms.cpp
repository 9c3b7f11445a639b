// Transforms: resize against Pillow fixtures (dev/fixtures/make_resize_fixtures.py), crops, normalisation.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/image/transforms.h"
#include "data_test_util.h"

namespace vlm {
namespace {

using testing::max_abs_diff;
using testing::test_image;

Image load_fixture(const std::string& name) {
  auto bytes = testing::read_bytes(str(VLM_DATA_FIXTURES, "/resize/", name));
  auto img = decode_image(bytes, "png");
  VLM_CHECK(img.ok(), img.status().to_string());
  return std::move(img).value();
}

TEST(Transforms, MatchesPillow) {
  auto manifest = nlohmann::json::parse(testing::read_bytes(str(VLM_DATA_FIXTURES, "/resize/manifest.json")));
  ASSERT_GE(manifest["cases"].size(), 14u);
  int worst = 0;
  for (const auto& c : manifest["cases"]) {
    const std::string out = c["out"];
    SCOPED_TRACE(out);
    const Image src = load_fixture(c["src"]);
    const Image expected = load_fixture(out);
    const ResizeFilter filter = c["filter"] == "bilinear" ? ResizeFilter::bilinear : ResizeFilter::bicubic;
    Image got;
    if (c["op"] == "resize") {
      got = resize_to(src, c["width"], c["height"], filter);
    } else {
      got = resize_shorter_then_center_crop(src, c["shorter"], c["width"], c["height"], filter);
    }
    ASSERT_EQ(got.width, expected.width);
    ASSERT_EQ(got.height, expected.height);
    const int diff = max_abs_diff(got, expected);
    EXPECT_LE(diff, 2);
    worst = std::max(worst, diff);
  }
  RecordProperty("max_abs_diff_vs_pillow", worst);
}

TEST(Transforms, IdentityAndConstantImages) {
  Image img = test_image(23, 17);
  for (auto f : {ResizeFilter::bilinear, ResizeFilter::bicubic, ResizeFilter::lanczos}) {
    EXPECT_EQ(resize_to(img, 23, 17, f).rgb, img.rgb);
    Image flat(31, 9);
    const uint8_t value[3] = {7, 128, 250};
    for (size_t i = 0; i < flat.rgb.size(); ++i) flat.rgb[i] = value[i % 3];
    for (auto [w, h] : {std::pair{5, 3}, std::pair{64, 40}, std::pair{13, 29}}) {
      Image r = resize_to(flat, w, h, f);
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
          EXPECT_EQ(r.pixel(x, y)[0], 7);
          EXPECT_EQ(r.pixel(x, y)[1], 128);
          EXPECT_EQ(r.pixel(x, y)[2], 250);
        }
    }
  }
}

TEST(Transforms, ResizeCropEqualsCropOfResize) {
  Image img = test_image(50, 40, 4);
  for (auto f : {ResizeFilter::bilinear, ResizeFilter::bicubic}) {
    Image full = resize_to(img, 33, 27, f);
    Image window = resize_crop(img, 33, 27, 5, 7, 20, 11, f);
    EXPECT_EQ(window.rgb, crop(full, 5, 7, 20, 11).rgb);
    // Crop-only along an axis that keeps its size.
    Image same_w = resize_crop(img, 50, 20, 10, 3, 30, 10, f);
    EXPECT_EQ(same_w.rgb, crop(resize_to(img, 50, 20, f), 10, 3, 30, 10).rgb);
  }
}

TEST(Transforms, ShorterSideThenCenterCrop) {
  Image landscape = test_image(60, 30), portrait = test_image(30, 61);
  Image a = resize_shorter_then_center_crop(landscape, 20);
  EXPECT_EQ(a.width, 20);
  EXPECT_EQ(a.height, 20);
  // Landscape: resized to 40x20, crop at x = 10.
  EXPECT_EQ(a.rgb, resize_crop(landscape, 40, 20, 10, 0, 20, 20, ResizeFilter::bicubic).rgb);
  // Portrait: 30x61 -> 20x40 (int(20 * 61 / 30) = 40), crop rows 10..30.
  Image b = resize_shorter_then_center_crop(portrait, 20, 20, 20, ResizeFilter::bilinear);
  EXPECT_EQ(b.rgb, resize_crop(portrait, 20, 40, 0, 10, 20, 20, ResizeFilter::bilinear).rgb);
  // Round half to even: 25 - 20 = 5 -> offset round(2.5) = 2.
  Image c = resize_shorter_then_center_crop(test_image(50, 40), 20, 20, 20, ResizeFilter::bilinear);
  EXPECT_EQ(c.rgb, resize_crop(test_image(50, 40), 25, 20, 2, 0, 20, 20, ResizeFilter::bilinear).rgb);
}

TEST(Transforms, ToChwNormalized) {
  Image img(2, 1);
  const uint8_t px[] = {0, 128, 255, 51, 102, 204};
  std::copy(px, px + 6, img.rgb.begin());
  const float mean[3] = {0.5f, 0.25f, 0.f}, stdv[3] = {0.5f, 0.5f, 2.f};
  std::vector<float> out(6, -99.f);
  to_chw_normalized(img, mean, stdv, out.data());
  // [3, H=1, W=2]: channel-major.
  const float expected[] = {(0 / 255.f - 0.5f) / 0.5f,   (51 / 255.f - 0.5f) / 0.5f,  (128 / 255.f - 0.25f) / 0.5f,
                            (102 / 255.f - 0.25f) / 0.5f, (255 / 255.f - 0.f) / 2.f, (204 / 255.f - 0.f) / 2.f};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(out[i], expected[i], 1e-6) << i;
}

}  // namespace
}  // namespace vlm
