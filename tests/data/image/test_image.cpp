// Image codecs: round trips for JPEG / PNG (every colour type and depth) / WebP, corrupt and truncated inputs,
// decompression bombs rejected from the header.
#include <gtest/gtest.h>
#include <turbojpeg.h>
#include <webp/encode.h>

#include <chrono>
#include <cmath>

#include "core/philox.h"
#include "data/image/image.h"
#include "data_test_util.h"

namespace vlm {
namespace {

using testing::make_png;
using testing::max_abs_diff;
using testing::mean_abs_diff;
using testing::test_image;

Image decode_ok(const std::vector<uint8_t>& bytes, const char* hint = "") {
  auto img = decode_image(bytes, hint);
  EXPECT_TRUE(img.ok()) << img.status().to_string();
  return img.ok() ? std::move(img).value() : Image();
}

TEST(Image, SniffFormats) {
  Image img = test_image(8, 8);
  EXPECT_EQ(sniff_image_format(encode_jpeg(img)->data(), encode_jpeg(img)->size()), ImageFormat::jpeg);
  EXPECT_EQ(sniff_image_format(encode_png(img)->data(), encode_png(img)->size()), ImageFormat::png);
  EXPECT_EQ(sniff_image_format(encode_webp(img)->data(), encode_webp(img)->size()), ImageFormat::webp);
  const uint8_t html[] = "<html>";
  EXPECT_EQ(sniff_image_format(html, 6), ImageFormat::unknown);
  auto bad = decode_image(html, 6, "jpg");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(".jpg"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("3c 68 74"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(decode_image(html, 0).ok());
}

TEST(Image, JpegRoundTrip) {
  Image img = test_image(48, 32);
  for (auto sub : {ChromaSubsampling::s444, ChromaSubsampling::s420}) {
    auto jpeg = encode_jpeg(img, 95, sub);
    ASSERT_TRUE(jpeg.ok());
    Image back = decode_ok(*jpeg, "jpg");
    ASSERT_EQ(back.width, 48);
    ASSERT_EQ(back.height, 32);
    EXPECT_LT(mean_abs_diff(img, back), 3.0);
    auto info = read_image_info(jpeg->data(), jpeg->size());
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->format, ImageFormat::jpeg);
    EXPECT_EQ(info->width, 48);
  }
  EXPECT_FALSE(encode_jpeg(img, 0).ok());
  EXPECT_FALSE(encode_jpeg(Image(), 90).ok());
}

// Compresses `pixels` (format pf) with TurboJPEG directly: for gray and CMYK inputs our encoder does not make.
std::vector<uint8_t> tj_compress(const std::vector<uint8_t>& pixels, int w, int h, int pf, int subsamp) {
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, pixels.data(), w, 0, h, pf, &out, &size, subsamp, 95, 0), 0) << tjGetErrorStr2(tj);
  std::vector<uint8_t> bytes(out, out + size);
  tjFree(out);
  tjDestroy(tj);
  return bytes;
}

TEST(Image, JpegGrayAndCmyk) {
  std::vector<uint8_t> gray(24 * 16);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = static_cast<uint8_t>(i * 7 % 200 + 20);
  Image g = decode_ok(tj_compress(gray, 24, 16, TJPF_GRAY, TJSAMP_GRAY));
  ASSERT_EQ(g.width, 24);
  for (size_t i = 0; i < gray.size(); ++i) {
    EXPECT_EQ(g.rgb[3 * i], g.rgb[3 * i + 1]);
    EXPECT_EQ(g.rgb[3 * i], g.rgb[3 * i + 2]);
  }
  // Flat CMYK (stored inverted, as Adobe writes it): C'=200, M'=100, Y'=250, K'=220 -> R = C'K'/255 ...
  std::vector<uint8_t> cmyk(16 * 16 * 4);
  for (size_t i = 0; i < cmyk.size(); i += 4) {
    cmyk[i] = 200;
    cmyk[i + 1] = 100;
    cmyk[i + 2] = 250;
    cmyk[i + 3] = 220;
  }
  Image c = decode_ok(tj_compress(cmyk, 16, 16, TJPF_CMYK, TJSAMP_444));
  ASSERT_EQ(c.width, 16);
  EXPECT_NEAR(c.rgb[0], 200 * 220 / 255, 3);
  EXPECT_NEAR(c.rgb[1], 100 * 220 / 255, 3);
  EXPECT_NEAR(c.rgb[2], 250 * 220 / 255, 3);
}

TEST(Image, PngRoundTripIsExact) {
  Image img = test_image(37, 23, 5);
  auto png = encode_png(img);
  ASSERT_TRUE(png.ok());
  Image back = decode_ok(*png, "png");
  EXPECT_EQ(back.width, 37);
  EXPECT_EQ(back.rgb, img.rgb);
}

uint8_t over_white(int c, int a) { return static_cast<uint8_t>((c * a + 255 * (255 - a) + 127) / 255); }

TEST(Image, PngColorTypesAndDepths) {
  const int w = 5, h = 3;
  // 8-bit gray.
  {
    std::vector<uint8_t> rows(w * h);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<uint8_t>(i * 17);
    Image img = decode_ok(make_png(w, h, 8, 0, rows));
    for (size_t i = 0; i < rows.size(); ++i)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(img.rgb[3 * i + c], rows[i]);
  }
  // 1-bit gray: 0 -> 0, 1 -> 255.
  {
    std::vector<uint8_t> rows = {0b10100000, 0b01010000, 0b11111000};
    Image img = decode_ok(make_png(w, h, 1, 0, rows));
    EXPECT_EQ(img.pixel(0, 0)[0], 255);
    EXPECT_EQ(img.pixel(1, 0)[0], 0);
    EXPECT_EQ(img.pixel(1, 1)[2], 255);
    EXPECT_EQ(img.pixel(4, 2)[1], 255);
  }
  // 16-bit gray and RGB: v * 257 maps back to v exactly; other values within 1.
  {
    std::vector<uint8_t> rows;
    std::vector<int> expect;
    for (int i = 0; i < w * h; ++i) {
      const int v16 = i % 2 ? (i * 13) * 257 : i * 4000 + 123;
      rows.push_back(static_cast<uint8_t>(v16 >> 8));
      rows.push_back(static_cast<uint8_t>(v16 & 0xff));
      expect.push_back(static_cast<int>(std::lround(v16 / 257.0)));
    }
    Image img = decode_ok(make_png(w, h, 16, 0, rows));
    for (int i = 0; i < w * h; ++i) EXPECT_NEAR(img.rgb[3 * i], expect[i], 1) << i;
    std::vector<uint8_t> rgb_rows;
    for (int i = 0; i < w * h; ++i)
      for (int c = 0; c < 3; ++c) {
        const int v = (i * 10 + c * 60) % 256;
        rgb_rows.push_back(static_cast<uint8_t>(v));
        rgb_rows.push_back(static_cast<uint8_t>(v));  // v * 257
      }
    Image rgb = decode_ok(make_png(w, h, 16, 2, rgb_rows));
    for (int i = 0; i < w * h; ++i)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(rgb.rgb[3 * i + c], (i * 10 + c * 60) % 256);
  }
  // Palette (8-bit and 4-bit), and palette with tRNS (alpha over white).
  {
    std::vector<uint8_t> palette = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30};
    std::vector<uint8_t> rows(w * h);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<uint8_t>(i % 4);
    Image img = decode_ok(make_png(w, h, 8, 3, rows, palette));
    for (size_t i = 0; i < rows.size(); ++i)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(img.rgb[3 * i + c], palette[rows[i] * 3 + c]);
    std::vector<uint8_t> rows4 = {0x01, 0x23, 0x00, 0x32, 0x10, 0x30, 0x33, 0x33, 0x30};
    Image img4 = decode_ok(make_png(w, h, 4, 3, rows4, palette));
    EXPECT_EQ(img4.pixel(1, 0)[0], 0);    // index 1: green
    EXPECT_EQ(img4.pixel(1, 0)[1], 255);
    EXPECT_EQ(img4.pixel(3, 0)[0], 10);   // index 3
    Image trns = decode_ok(make_png(w, h, 8, 3, rows, palette, {0, 128}));  // index 0 transparent, 1 half
    EXPECT_EQ(trns.pixel(0, 0)[0], 255);  // transparent red -> white
    EXPECT_EQ(trns.pixel(0, 0)[1], 255);
    EXPECT_EQ(trns.pixel(1, 0)[0], over_white(0, 128));
    EXPECT_EQ(trns.pixel(1, 0)[1], over_white(255, 128));
    EXPECT_EQ(trns.pixel(2, 0)[2], 255);  // index 2 has no tRNS entry: opaque blue
    EXPECT_EQ(trns.pixel(2, 0)[0], 0);
  }
  // RGBA 8-bit, RGBA 16-bit, gray+alpha.
  {
    std::vector<uint8_t> rows, rows16, ga;
    for (int i = 0; i < w * h; ++i) {
      const uint8_t px[4] = {static_cast<uint8_t>(i * 15), 100, 200, static_cast<uint8_t>(i * 18)};
      for (uint8_t v : px) {
        rows.push_back(v);
        rows16.push_back(v);
        rows16.push_back(v);
      }
      ga.push_back(static_cast<uint8_t>(i * 15));
      ga.push_back(static_cast<uint8_t>(i * 18));
    }
    Image a8 = decode_ok(make_png(w, h, 8, 6, rows));
    Image a16 = decode_ok(make_png(w, h, 16, 6, rows16));
    Image gray_alpha = decode_ok(make_png(w, h, 8, 4, ga));
    for (int i = 0; i < w * h; ++i) {
      const int a = i * 18;
      EXPECT_EQ(a8.rgb[3 * i], over_white(i * 15, a));
      EXPECT_EQ(a8.rgb[3 * i + 1], over_white(100, a));
      EXPECT_EQ(a8.rgb[3 * i + 2], over_white(200, a));
      EXPECT_EQ(a16.rgb[3 * i + 2], over_white(200, a));
      EXPECT_EQ(gray_alpha.rgb[3 * i + 1], over_white(i * 15, a));
    }
  }
}

TEST(Image, WebpRoundTrip) {
  Image img = test_image(40, 30, 3);
  auto lossless = encode_webp(img, 100, true);
  ASSERT_TRUE(lossless.ok());
  Image back = decode_ok(*lossless, "webp");
  EXPECT_EQ(back.rgb, img.rgb);
  auto lossy = encode_webp(img, 90, false);
  ASSERT_TRUE(lossy.ok());
  EXPECT_LT(mean_abs_diff(img, decode_ok(*lossy)), 6.0);
  // Alpha: composited over white.
  std::vector<uint8_t> rgba(8 * 8 * 4);
  for (size_t i = 0; i < rgba.size(); i += 4) {
    rgba[i] = 10;
    rgba[i + 1] = 200;
    rgba[i + 2] = 60;
    rgba[i + 3] = i < rgba.size() / 2 ? 0 : 255;
  }
  uint8_t* out = nullptr;
  size_t n = WebPEncodeLosslessRGBA(rgba.data(), 8, 8, 32, &out);
  ASSERT_GT(n, 0u);
  std::vector<uint8_t> bytes(out, out + n);
  WebPFree(out);
  Image a = decode_ok(bytes);
  EXPECT_EQ(a.pixel(0, 0)[0], 255);  // transparent top half -> white
  EXPECT_EQ(a.pixel(0, 0)[1], 255);
  EXPECT_EQ(a.pixel(0, 7)[0], 10);
  EXPECT_EQ(a.pixel(0, 7)[1], 200);
}

TEST(Image, TruncatedAndCorruptInputsAreErrors) {
  Image img = test_image(64, 48, 9);
  const std::vector<uint8_t> jpeg = *encode_jpeg(img, 90), png = *encode_png(img), webp = *encode_webp(img, 80);
  for (const auto* bytes : {&jpeg, &png, &webp}) {
    for (size_t keep : {bytes->size() / 2, bytes->size() - 20, size_t{30}, size_t{10}, size_t{4}}) {
      std::vector<uint8_t> cut(bytes->begin(), bytes->begin() + static_cast<std::ptrdiff_t>(keep));
      auto r = decode_image(cut);
      EXPECT_FALSE(r.ok()) << image_format_name(sniff_image_format(bytes->data(), bytes->size())) << " cut to " << keep;
    }
  }
  auto jr =
      decode_image(std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(jpeg.size() / 2)));
  ASSERT_FALSE(jr.ok());
  EXPECT_NE(jr.status().message().find("JPEG"), std::string::npos) << jr.status().message();
  // PNG with a corrupted IDAT byte: the chunk CRC fails.
  std::vector<uint8_t> bad_png = png;
  bad_png[bad_png.size() - 30] ^= 0xff;
  auto pr = decode_image(bad_png);
  ASSERT_FALSE(pr.ok());
  EXPECT_NE(pr.status().message().find("PNG"), std::string::npos);
  // A JPEG whose entropy-coded data is garbage after the headers.
  std::vector<uint8_t> bad_jpeg = jpeg;
  for (size_t i = bad_jpeg.size() / 3; i < bad_jpeg.size() - 2; ++i) bad_jpeg[i] = 0xFF;
  (void)decode_image(bad_jpeg);  // libjpeg may or may not flag this; it must not crash
}

TEST(Image, MutationFuzzNeverCrashes) {
  Image img = test_image(32, 24, 1);
  const std::vector<std::vector<uint8_t>> seeds = {*encode_jpeg(img, 80), *encode_png(img), *encode_webp(img, 80),
                                                   *encode_webp(img, 80, true)};
  Philox rng(123);
  int failures = 0;
  for (const auto& seed : seeds) {
    for (int iter = 0; iter < 150; ++iter) {
      std::vector<uint8_t> bytes = seed;
      const int edits = 1 + static_cast<int>(rng.uniform_int(6));
      for (int e = 0; e < edits; ++e) bytes[rng.uniform_int(bytes.size())] = static_cast<uint8_t>(rng.next_u32());
      if (rng.uniform_int(4) == 0) bytes.resize(1 + rng.uniform_int(bytes.size()));
      auto r = decode_image(bytes);
      if (r.ok()) {
        EXPECT_EQ(r->rgb.size(), static_cast<size_t>(r->width) * r->height * 3);
      } else {
        ++failures;
      }
    }
  }
  EXPECT_GT(failures, 0);
}

// Sets width/height in a PNG's IHDR and fixes its CRC.
std::vector<uint8_t> png_with_size(std::vector<uint8_t> png, uint32_t w, uint32_t h) {
  for (int i = 0; i < 4; ++i) {
    png[16 + i] = static_cast<uint8_t>(w >> (24 - 8 * i));
    png[20 + i] = static_cast<uint8_t>(h >> (24 - 8 * i));
  }
  const uint32_t crc = testing::crc32_of(png.data() + 12, 17);
  for (int i = 0; i < 4; ++i) png[29 + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
  return png;
}

TEST(Image, DecompressionBombsRejectedFromTheHeader) {
  Image img = test_image(16, 16);
  const std::vector<uint8_t> bomb = png_with_size(*encode_png(img), 30000, 30000);
  auto info = read_image_info(bomb.data(), bomb.size());
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->width, 30000);
  EXPECT_EQ(info->height, 30000);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = decode_image(bomb, "png");
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(r.status().message().find("900000000 pixels"), std::string::npos) << r.status().message();
  EXPECT_LT(ms, 1000.0) << "rejection must come from the header, not after decoding 2.7 GB of pixels";

  // JPEG: patch the SOF0 frame size to 30000 x 30000.
  std::vector<uint8_t> jpeg = *encode_jpeg(img, 90);
  size_t sof = 0;
  for (size_t i = 2; i + 8 < jpeg.size(); ++i)
    if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xC0) {
      sof = i;
      break;
    }
  ASSERT_GT(sof, 0u);
  jpeg[sof + 5] = 30000 >> 8;
  jpeg[sof + 6] = 30000 & 0xff;
  jpeg[sof + 7] = 30000 >> 8;
  jpeg[sof + 8] = 30000 & 0xff;
  auto jr = decode_image(jpeg, "jpg");
  ASSERT_FALSE(jr.ok());
  EXPECT_NE(jr.status().message().find("exceeds the limit"), std::string::npos) << jr.status().message();

  // A configurable limit applies to every format.
  ImageDecodeOptions small;
  small.max_pixels = 255;
  for (const auto& bytes : {*encode_jpeg(img), *encode_png(img), *encode_webp(img)}) {
    EXPECT_FALSE(decode_image(bytes, "", small).ok());
    small.max_pixels = 256;
    auto fits = decode_image(bytes, "", small);
    EXPECT_TRUE(fits.ok()) << fits.status().to_string();
    small.max_pixels = 255;
  }
}

}  // namespace
}  // namespace vlm
