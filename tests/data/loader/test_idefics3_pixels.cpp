// Idefics3 / SmolVLM pixel values: frame counts and order, constant images staying constant through every resize
// and the normalization arithmetic; and parity with transformers' PIL-path Idefics3ImageProcessor on random images
// (tests/data/tokenizer/fixtures/hf/expected/idefics3_pixels.safetensors, made by
// dev/fixtures/make_tokenizer_fixtures.py): identical frames, pixel values within 1e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "data/loader/idefics3_pixels.h"

namespace vlm {
namespace {

Idefics3Options small_options() {
  Idefics3Options o;
  o.longest_edge = 96;
  o.max_image_size = 32;
  return o;
}

TEST(Idefics3Pixels, FramesAreTheTilesThenTheGlobalImage) {
  const Idefics3Options o = small_options();
  Image img(400, 300);  // w x h: longest edge 96 -> 96 x 72 -> 96 x 96 -> 3 x 3 tiles
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>((i * 7) % 251);
  const Idefics3Pixels p = idefics3_pixel_values(img, o);
  EXPECT_EQ(p.layout.rows, 3);
  EXPECT_EQ(p.layout.cols, 3);
  ASSERT_EQ(p.frames.shape(), (Shape{10, 3, 32, 32}));
  for (int64_t i = 0; i < p.frames.numel(); ++i) {
    const float v = p.frames.data<float>()[i];
    ASSERT_TRUE(v >= -1.f && v <= 1.f) << "element " << i << " = " << v;  // (x / 255 - 0.5) / 0.5
  }
  Idefics3Options whole = o;
  whole.do_image_splitting = false;
  EXPECT_EQ(idefics3_pixel_values(img, whole).frames.shape(), (Shape{1, 3, 32, 32}));
}

TEST(Idefics3Pixels, ConstantImagesStayConstantUnderEveryFilter) {
  for (int resample : {1, 2, 3}) {
    Idefics3Options o = small_options();
    o.resample = resample;
    o.image_mean[1] = 0.25f;
    o.image_std[2] = 2.f;
    Image img(45, 70);
    const uint8_t rgb[3] = {0, 200, 255};
    for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = rgb[i % 3];
    const Idefics3Pixels p = idefics3_pixel_values(img, o);
    const int64_t plane = 32 * 32;
    for (int64_t f = 0; f < p.frames.dim(0); ++f)
      for (int ch = 0; ch < 3; ++ch) {
        const float want =
            (static_cast<float>(static_cast<double>(rgb[ch]) / 255.0) - o.image_mean[ch]) / o.image_std[ch];
        const float* x = p.frames.data<float>() + (f * 3 + ch) * plane;
        for (int64_t i = 0; i < plane; ++i) ASSERT_EQ(x[i], want) << "resample " << resample << " frame " << f;
      }
  }
}

TEST(Idefics3Pixels, PreprocessorConfigFieldsAndErrors) {
  auto ok = Idefics3Options::from_preprocessor_config(
      nlohmann::json::parse(R"({"resample": 3, "image_mean": [0.1, 0.2, 0.3], "image_std": 0.5,
                                "rescale_factor": 0.00392156862745098, "do_normalize": false})"),
      "pp.json");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->resample, 3);
  EXPECT_FLOAT_EQ(ok->image_mean[2], 0.3f);
  EXPECT_FLOAT_EQ(ok->image_std[1], 0.5f);
  EXPECT_FALSE(ok->do_normalize);
  for (const char* bad : {R"({"resample": 0})", R"({"image_mean": [1, 2]})", R"({"image_std": [1, 0, 1]})",
                          R"({"rescale_factor": -1})", R"({"do_rescale": "yes"})"}) {
    auto r = Idefics3Options::from_preprocessor_config(nlohmann::json::parse(bad), "pp.json");
    ASSERT_FALSE(r.ok()) << bad;
    const std::string key = nlohmann::json::parse(bad).begin().key();
    EXPECT_NE(r.status().message().find("pp.json: " + key), std::string::npos) << r.status().message();
  }
}

TEST(Idefics3Pixels, MatchesTransformersImageProcessor) {
  const std::string path = std::string(VLM_HF_FIXTURES) + "/expected/idefics3_pixels.safetensors";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent: make it with make_tokenizer_fixtures.py";
  auto file = safetensors_load(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const nlohmann::json meta = nlohmann::json::parse(file->metadata.at("info"));
  auto o = Idefics3Options::from_preprocessor_config(meta["config"], path);
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  double worst = 0;
  for (size_t i = 0; i < meta["images"].size(); ++i) {
    const nlohmann::json& m = meta["images"][i];
    SCOPED_TRACE(m.dump());
    const Tensor& u8 = file->tensors.at("image_" + std::to_string(i));
    Image img(static_cast<int>(u8.dim(1)), static_cast<int>(u8.dim(0)));
    std::copy_n(u8.data<uint8_t>(), img.rgb.size(), img.rgb.begin());
    const Idefics3Pixels p = idefics3_pixel_values(img, *o);
    EXPECT_EQ(p.layout.rows, m["rows"].get<int>());
    EXPECT_EQ(p.layout.cols, m["cols"].get<int>());
    const Tensor& want = file->tensors.at("pixels_" + std::to_string(i));
    ASSERT_EQ(p.frames.shape(), want.shape());
    for (int64_t k = 0; k < want.numel(); ++k) {
      const double d = std::fabs(static_cast<double>(p.frames.data<float>()[k]) - want.data<float>()[k]);
      ASSERT_FALSE(std::isnan(p.frames.data<float>()[k])) << "element " << k;
      worst = std::max(worst, d);
    }
  }
  RecordProperty("max_abs_diff", std::to_string(worst));
  EXPECT_LE(worst, 1e-5);
}

}  // namespace
}  // namespace vlm
