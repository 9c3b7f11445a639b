// The image pipeline on malformed input: zero-byte and few-byte data, JPEG / PNG / WebP truncated at every length,
// random byte corruption, and decompression bombs of every format (the header claims a huge size: rejected from
// the header, before any pixel memory). Every case must give a clear Status (or, for damage a decoder tolerates,
// a full S x S output of finite values) and never crash, in every resize mode, with and without DCT scaling; and
// extreme aspect ratios cost only the output window.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "data/image/image_pipeline.h"
#include "data/io/webdataset.h"
#include "data_test_util.h"

namespace vlm {
namespace {

using testing::test_image;

constexpr ImageResizeMode kModes[] = {ImageResizeMode::center_crop, ImageResizeMode::border_pad,
                                      ImageResizeMode::random_resized_crop};

// Runs the whole pipeline (to normalized floats) on `bytes` in `mode`; on success checks every output value is
// finite and written. Returns the status.
Status run_checked(const std::vector<uint8_t>& bytes, ImageResizeMode mode, bool dct, int size = 24) {
  ImagePipelineOptions o;
  o.size = size;
  o.mode = mode;
  o.dct_scaling = dct;
  Philox rng(3, bytes.size());
  std::vector<float> out(static_cast<size_t>(3) * size * size, std::nanf(""));
  Status s = image_pipeline_run(bytes.data(), bytes.size(), o, &rng, out.data());
  if (s.ok())
    for (size_t i = 0; i < out.size(); ++i)
      if (!std::isfinite(out[i])) {
        ADD_FAILURE() << "output value " << i << " not written or not finite";
        break;
      }
  return s;
}

// The three formats, large enough for DCT scaling at size 24 (JPEG progressive too).
std::vector<std::pair<std::string, std::vector<uint8_t>>> valid_inputs() {
  const Image img = test_image(120, 90, 11);
  return {{"jpeg", *encode_jpeg(img, 90)},
          {"png", *encode_png(img)},
          {"webp", *encode_webp(img, 80.f)},
          {"webp-lossless", *encode_webp(img, 80.f, true)}};
}

TEST(ImagePipelineMalformed, EmptyAndTinyInputsAreParseErrors) {
  const std::vector<std::vector<uint8_t>> cases = {
      {},                                                    // zero bytes
      {0xFF},                                                // one byte
      {0xFF, 0xD8},                                          // JPEG SOI only
      {0xFF, 0xD8, 0xFF},                                    // SOI + a marker start
      {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'},         // PNG signature only
      {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'},  // RIFF/WEBP header only
      std::vector<uint8_t>(64, 0),                           // zeros
  };
  for (size_t i = 0; i < cases.size(); ++i)
    for (ImageResizeMode mode : kModes) {
      SCOPED_TRACE(str("case ", i, " mode ", image_resize_mode_name(mode)));
      const Status s = run_checked(cases[i], mode, true);
      ASSERT_FALSE(s.ok());
      EXPECT_EQ(s.code(), StatusCode::parse_error) << s.to_string();
      EXPECT_FALSE(s.message().empty());
    }
  // A null pointer with size 0 is the same empty input.
  ImagePipelineOptions o;
  o.size = 8;
  EXPECT_EQ(image_pipeline_pixels(nullptr, 0, o).status().code(), StatusCode::parse_error);
  // Through the sample form the error names shard, key and field.
  WebDatasetSample sample;
  sample.shard = "bad-000.tar";
  sample.key = "k0";
  sample.fields["png"] = {};
  std::vector<float> out(3 * 8 * 8);
  const Status s = image_pipeline_sample(sample, o, nullptr, out.data());
  EXPECT_NE(s.message().find("bad-000.tar: sample 'k0' field 'png'"), std::string::npos) << s.message();
}

TEST(ImagePipelineMalformed, TruncatedAtEveryLengthNeverCrashes) {
  for (const auto& [name, bytes] : valid_inputs()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(run_checked(bytes, ImageResizeMode::center_crop, true).ok());
    int errors = 0, tried = 0;
    // Every length below 64 bytes (headers), then about 150 lengths spread over the rest.
    const size_t step = std::max<size_t>(1, bytes.size() / 150);
    for (size_t len = 0; len < bytes.size(); len += len < 64 ? 1 : step) {
      const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(len));
      for (ImageResizeMode mode : kModes) {
        const Status s = run_checked(cut, mode, len % 2 == 0);
        ++tried;
        if (!s.ok()) {
          ++errors;
          EXPECT_TRUE(s.code() == StatusCode::parse_error || s.code() == StatusCode::invalid_argument)
              << "length " << len << ": " << s.to_string();
        }
      }
    }
    // Headers cut short must fail; a decoder may tolerate a missing tail, but not most cuts.
    EXPECT_GE(errors, tried / 2) << errors << " of " << tried;
  }
}

TEST(ImagePipelineMalformed, CorruptedBytesNeverCrash) {
  Philox rng(77);
  for (const auto& [name, bytes] : valid_inputs()) {
    SCOPED_TRACE(name);
    int errors = 0;
    for (int iter = 0; iter < 120; ++iter) {
      std::vector<uint8_t> bad = bytes;
      const int edits = 1 + static_cast<int>(rng.uniform_int(8));
      for (int e = 0; e < edits; ++e) bad[rng.uniform_int(bad.size())] = static_cast<uint8_t>(rng.next_u32());
      const Status s = run_checked(bad, kModes[iter % 3], iter % 2 == 0);
      errors += !s.ok();
    }
    // PNG and WebP carry checksums / strict headers; a JPEG decoder tolerates most entropy-data damage.
    if (name == "png") {
      EXPECT_GT(errors, 60);
    }
  }
}

// Width and height fields rewritten in the header of each format.
std::vector<uint8_t> png_claiming(uint32_t w, uint32_t h) {
  std::vector<uint8_t> png = *encode_png(test_image(16, 16));
  for (int i = 0; i < 4; ++i) {
    png[16 + i] = static_cast<uint8_t>(w >> (24 - 8 * i));
    png[20 + i] = static_cast<uint8_t>(h >> (24 - 8 * i));
  }
  const uint32_t crc = testing::crc32_of(png.data() + 12, 17);  // IHDR type + data
  for (int i = 0; i < 4; ++i) png[29 + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
  return png;
}

// A lossless WebP (simple format, chunk "VP8L") whose 14-bit width-1 / height-1 fields say w x h.
std::vector<uint8_t> webp_lossless_claiming(uint32_t w, uint32_t h) {
  std::vector<uint8_t> webp = *encode_webp(test_image(16, 16), 80.f, true);
  VLM_CHECK(webp.size() > 25 && std::equal(webp.begin() + 12, webp.begin() + 16, "VP8L"), "not a VP8L WebP");
  const uint32_t bits = ((w - 1) & 0x3FFF) | (((h - 1) & 0x3FFF) << 14) | (static_cast<uint32_t>(webp[24]) >> 4 << 28);
  for (int i = 0; i < 4; ++i) webp[21 + i] = static_cast<uint8_t>(bits >> (8 * i));
  return webp;
}

std::vector<uint8_t> jpeg_claiming(uint16_t w, uint16_t h) {
  std::vector<uint8_t> jpeg = *encode_jpeg(test_image(16, 16), 90);
  for (size_t i = 2; i + 8 < jpeg.size(); ++i)
    if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xC0) {
      jpeg[i + 5] = static_cast<uint8_t>(h >> 8);
      jpeg[i + 6] = static_cast<uint8_t>(h & 0xff);
      jpeg[i + 7] = static_cast<uint8_t>(w >> 8);
      jpeg[i + 8] = static_cast<uint8_t>(w & 0xff);
      return jpeg;
    }
  VLM_FAIL("no SOF0 marker");
}

TEST(ImagePipelineMalformed, BombsOfEveryFormatRejectedFromTheHeader) {
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> bombs = {
      {"jpeg", jpeg_claiming(60000, 60000)},
      {"png", png_claiming(100000, 100000)},
      {"webp", webp_lossless_claiming(16384, 16384)},
  };
  for (const auto& [name, bytes] : bombs) {
    SCOPED_TRACE(name);
    auto info = read_image_info(bytes.data(), bytes.size());
    ASSERT_TRUE(info.ok()) << info.status().to_string();
    EXPECT_GT(static_cast<uint64_t>(info->width) * static_cast<uint64_t>(info->height), 64ull << 20);
    for (ImageResizeMode mode : kModes)
      for (bool dct : {true, false}) {
        const auto t0 = std::chrono::steady_clock::now();
        const Status s = run_checked(bytes, mode, dct, 224);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        ASSERT_FALSE(s.ok());
        EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.to_string();
        EXPECT_NE(s.message().find("possible decompression bomb"), std::string::npos) << s.message();
        EXPECT_LT(ms, 200.0) << "rejected from the header, before any pixel memory";
      }
  }
}

// A legal but extreme image (1 x 40000 px, within max_pixels): center_crop resizes its shorter side to S, i.e. to a
// virtual 224 x 8960000 image. Only the S x S window may be computed (weights included), in both orientations.
TEST(ImagePipelineMalformed, ExtremeAspectRatiosCostOnlyTheWindow) {
  for (const auto& [w, h] : {std::pair{1, 40000}, std::pair{40000, 1}}) {
    SCOPED_TRACE(str(w, "x", h));
    const std::vector<uint8_t> png = *encode_png(test_image(w, h, 9));
    for (ImageResizeMode mode : kModes) {
      const auto t0 = std::chrono::steady_clock::now();
      const Status s = run_checked(png, mode, true, 224);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_TRUE(s.ok()) << s.to_string();
      EXPECT_LT(ms, 150.0) << image_resize_mode_name(mode);
    }
  }
}

}  // namespace
}  // namespace vlm
