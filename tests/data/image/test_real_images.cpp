// Real images from a Debian package: python3-skimage's sample folder (photos as JPEG, PNGs that are gray, 1-bit,
// palette, palette with transparency, RGBA, and a JPEG cut off after 400 bytes). Every one goes through the decoder
// and the image pipeline in every mode: decoded ones have their header's size, pixels equal to Pillow's decode of
// the same file (per-channel sums measured with Debian's python3-pil 9.4), finite normalized values; the truncated
// one is rejected with a message naming the format, and counted. Skipped when the folder is absent
// (scripts/install_deps.sh unpacks it; VLM_SKIMAGE_DATA overrides). And the decompression-bomb path at the size of
// openclipart-png's largest PNG (20990 x 29700; that package is a 131 MB download, so its header is generated):
// rejected from the header with a clear message, without allocating its pixels (peak RSS checked).
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "core/philox.h"
#include "data/image/image.h"
#include "data/image/image_pipeline.h"
#include "data_test_util.h"

namespace vlm {
namespace {

struct Expected3 {
  int width, height;
  uint64_t sum[3];  // per-channel sums of Pillow's RGB decode (alpha over white)
  bool alpha;       // composited: our rounding of alpha may differ from Pillow's by one level
};

// Measured with /usr/bin/python3 (Pillow 9.4.0): Image.open(f).convert("RGB") (RGBA: alpha_composite over white).
const std::map<std::string, Expected3>& pillow_sums() {
  static const std::map<std::string, Expected3> m = {
      {"rocket.jpg", {640, 427, {14283182, 16750506, 22483056}, false}},
      {"retina.jpg", {1411, 1411, {317419532, 126513143, 91812157}, false}},
      {"hubble_deep_field.jpg", {1000, 872, {16203335, 17258561, 16646155}, false}},
      {"astronaut.png", {512, 512, {37109758, 27724204, 25290362}, false}},
      {"camera.png", {512, 512, {33832495, 33832495, 33832495}, false}},
      {"green_palette.png", {320, 240, {71188, 78838, 71188}, false}},
      {"foo3x5x4indexed.png", {5, 3, {1910, 1430, 3825}, true}},
      {"checker_bilevel.png", {10, 10, {12750, 12750, 12750}, false}},
      {"palette_gray.png", {10, 10, {13750, 13750, 13750}, false}},
      {"horse.png", {400, 328, {22391924, 22391924, 22391924}, true}},
      {"logo.png", {500, 500, {53835289, 49921750, 32302192}, true}},
  };
  return m;
}

std::vector<std::filesystem::path> sample_images(const std::string& dir) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string ext = e.path().extension().string();
    if (ext == ".jpg" || ext == ".png") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(RealImages, SkimageSamplesThroughTheDecoderAndEveryPipelineMode) {
  const std::string dir = testing::skimage_data_dir();
  if (dir.empty()) GTEST_SKIP() << "no python3-skimage sample images (scripts/install_deps.sh unpacks them)";
  const auto files = sample_images(dir);
  ASSERT_GE(files.size(), 30u) << dir;
  int decoded = 0, rejected = 0, checked_sums = 0;
  for (const auto& path : files) {
    const std::string name = path.filename().string();
    SCOPED_TRACE(name);
    const std::vector<uint8_t> bytes = testing::read_bytes(path.string());
    auto img = decode_image(bytes, path.extension().string().substr(1));
    if (!img.ok()) {
      // Only the cut-off JPEG may fail, and with a message naming the format.
      EXPECT_EQ(name, "truncated.jpg") << img.status().to_string();
      EXPECT_EQ(img.status().code(), StatusCode::parse_error) << img.status().to_string();
      EXPECT_EQ(img.status().message().rfind("JPEG: ", 0), 0u) << img.status().to_string();
      ++rejected;
      for (auto mode : {ImageResizeMode::center_crop, ImageResizeMode::random_resized_crop}) {
        ImagePipelineOptions o;
        o.mode = mode;
        Philox rng(1, 0);
        EXPECT_FALSE(image_pipeline_tensor(bytes.data(), bytes.size(), o, &rng).ok());
      }
      continue;
    }
    ++decoded;
    auto info = read_image_info(bytes.data(), bytes.size());
    ASSERT_TRUE(info.ok()) << info.status().to_string();
    EXPECT_EQ(img->width, info->width);
    EXPECT_EQ(img->height, info->height);
    EXPECT_EQ(img->rgb.size(), static_cast<size_t>(img->width) * img->height * 3);
    if (auto it = pillow_sums().find(name); it != pillow_sums().end()) {
      const Expected3& e = it->second;
      EXPECT_EQ(img->width, e.width);
      EXPECT_EQ(img->height, e.height);
      for (int c = 0; c < 3; ++c) {
        uint64_t sum = 0;
        for (size_t i = static_cast<size_t>(c); i < img->rgb.size(); i += 3) sum += img->rgb[i];
        const uint64_t tolerance = e.alpha ? static_cast<uint64_t>(e.width) * e.height : 0;
        EXPECT_LE(sum > e.sum[c] ? sum - e.sum[c] : e.sum[c] - sum, tolerance) << "channel " << c;
      }
      ++checked_sums;
    }
    for (auto mode : {ImageResizeMode::center_crop, ImageResizeMode::border_pad, ImageResizeMode::random_resized_crop})
      for (bool dct : {false, true}) {
        ImagePipelineOptions o;
        o.size = 96;
        o.mode = mode;
        o.dct_scaling = dct;
        Philox rng(7, static_cast<uint64_t>(decoded));
        ImagePlan plan;
        auto t = image_pipeline_tensor(bytes.data(), bytes.size(), o, &rng, &plan);
        ASSERT_TRUE(t.ok()) << image_resize_mode_name(mode) << ": " << t.status().to_string();
        EXPECT_EQ(plan.source.width, info->width);
        const float* p = t->data<float>();
        for (int64_t i = 0; i < t->numel(); ++i)
          ASSERT_TRUE(std::isfinite(p[i]) && p[i] >= -1.f && p[i] <= 1.f) << "value " << p[i] << " at " << i;
      }
  }
  EXPECT_EQ(rejected, 1) << "exactly the truncated JPEG";
  EXPECT_EQ(decoded, static_cast<int>(files.size()) - 1);
  EXPECT_EQ(checked_sums, static_cast<int>(pillow_sums().size()));
}

// A PNG whose header claims `width` x `height` (RGBA, 8 bit), with a real 16 x 16 image's data after it.
std::vector<uint8_t> png_claiming(int width, int height) {
  std::vector<uint8_t> png = *encode_png(testing::test_image(16, 16));
  for (int i = 0; i < 4; ++i) {
    png[16 + i] = static_cast<uint8_t>(static_cast<uint32_t>(width) >> (24 - 8 * i));
    png[20 + i] = static_cast<uint8_t>(static_cast<uint32_t>(height) >> (24 - 8 * i));
  }
  png[25] = 6;  // colour type RGBA: 4 bytes a pixel, 2.5 GB decoded
  const uint32_t crc = testing::crc32_of(png.data() + 12, 17);
  for (int i = 0; i < 4; ++i) png[29 + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
  return png;
}

long peak_rss_kb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

TEST(RealImages, OpenclipartSizedPngIsRejectedFromItsHeaderWithoutAllocating) {
  const std::vector<uint8_t> bomb = png_claiming(20990, 29700);
  auto info = read_image_info(bomb.data(), bomb.size());
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->width, 20990);
  EXPECT_EQ(info->height, 29700);
  const long rss_before = peak_rss_kb();
  const std::string expected =
      "20990x29700 = 623403000 pixels exceeds the limit of 67108864 (possible decompression bomb)";
  auto decoded = decode_image(bomb, "png");
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(decoded.status().message().find(expected), std::string::npos) << decoded.status().to_string();
  auto region = decode_image_region(bomb.data(), bomb.size(), CropWindow{0, 0, 64, 64});
  ASSERT_FALSE(region.ok());
  EXPECT_NE(region.status().message().find("possible decompression bomb"), std::string::npos);
  for (auto mode : {ImageResizeMode::center_crop, ImageResizeMode::border_pad, ImageResizeMode::random_resized_crop}) {
    ImagePipelineOptions o;
    o.mode = mode;
    Philox rng(3, 0);
    auto t = image_pipeline_tensor(bomb.data(), bomb.size(), o, &rng);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(t.status().message().find(expected), std::string::npos) << t.status().to_string();
  }
  // Decoding it would take 2.5 GB (RGBA) and its RGB output 1.9 GB; the peak may not move by more than noise.
  EXPECT_LT(peak_rss_kb() - rss_before, 64 * 1024) << "KB of peak RSS added while rejecting the bomb";
}

}  // namespace
}  // namespace vlm
