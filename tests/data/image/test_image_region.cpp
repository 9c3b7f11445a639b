// decode_image_region (libjpeg's partial decode) against the full decode: the same pixels, bit for bit, for every
// chroma subsampling, progressive files, every DCT scale and many random windows including ones that touch the
// image's edges; the same errors for truncated and corrupt files. And random_resized_crop through the pipeline with
// and without region decode: the same output.
#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <filesystem>

#include "core/philox.h"
#include "data/image/image.h"
#include "data/image/image_pipeline.h"
#include "data/image/transforms.h"
#include "data_test_util.h"

namespace vlm {
namespace {

using testing::max_abs_diff;

// Sharp, saturated colour edges and noise (chroma that changes every pixel or two: what the fancy upsampling at a
// strip's edge would get wrong), over a gradient.
Image busy_image(int w, int h, uint64_t seed) {
  Philox rng(seed, 1);
  Image img(w, h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = img.pixel(x, y);
      const bool block = ((x / 3) + (y / 5)) % 2 == 0;
      p[0] = static_cast<uint8_t>(block ? 230 : (x * 255) / std::max(1, w - 1));
      p[1] = static_cast<uint8_t>(rng.uniform_int(256));
      p[2] = static_cast<uint8_t>(block ? (y * 255) / std::max(1, h - 1) : 20);
    }
  return img;
}

// TurboJPEG directly: subsamplings and progressive files our encoder does not make.
std::vector<uint8_t> tj_encode(const Image& img, int subsamp, bool progressive, int quality = 92) {
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, img.rgb.data(), img.width, 0, img.height, TJPF_RGB, &out, &size, subsamp, quality,
                        progressive ? TJFLAG_PROGRESSIVE : 0),
            0)
      << tjGetErrorStr2(tj);
  std::vector<uint8_t> bytes(out, out + size);
  tjFree(out);
  tjDestroy(tj);
  return bytes;
}

// Random windows of a w x h image, plus the edge cases: the whole image, single pixels in the corners, full rows
// and columns at the edges.
std::vector<CropWindow> windows(int w, int h, int n_random, uint64_t seed) {
  std::vector<CropWindow> out = {{0, 0, w, h},         {0, 0, 1, 1},         {w - 1, h - 1, 1, 1},
                                 {0, h - 1, w, 1},     {w - 1, 0, 1, h},     {0, 0, std::max(1, w / 3), h},
                                 {w / 2, h / 2, w - w / 2, h - h / 2}};
  Philox rng(seed, 2);
  for (int i = 0; i < n_random; ++i) {
    const int ww = 1 + static_cast<int>(rng.uniform_int(static_cast<uint64_t>(w)));
    const int wh = 1 + static_cast<int>(rng.uniform_int(static_cast<uint64_t>(h)));
    CropWindow c{static_cast<int>(rng.uniform_int(static_cast<uint64_t>(w - ww + 1))),
                 static_cast<int>(rng.uniform_int(static_cast<uint64_t>(h - wh + 1))), ww, wh};
    if (i % 4 == 1) c.x = w - ww;  // touching the right edge
    if (i % 4 == 2) c.y = h - wh;  // the bottom edge
    out.push_back(c);
  }
  return out;
}

Image window_of(const Image& img, const CropWindow& c) { return crop(img, c.x, c.y, c.width, c.height); }

std::string name(const CropWindow& c) { return str(c.width, "x", c.height, "+", c.x, "+", c.y); }

// Every window of decode_image_region equals the same window of decode_image, at every DCT scale.
void expect_regions_match(const std::vector<uint8_t>& jpeg, const std::string& what, int n_random,
                          const std::vector<int>& hints = {0, 2, 4, 8}) {
  auto info = read_image_info(jpeg.data(), jpeg.size());
  ASSERT_TRUE(info.ok()) << what << ": " << info.status().to_string();
  for (int hint : hints) {
    ImageDecodeOptions o;
    if (hint > 0) o.min_width = o.min_height = std::max(1, std::min(info->width, info->height) / hint);
    auto full = decode_image(jpeg, "", o);
    ASSERT_TRUE(full.ok()) << what << ": " << full.status().to_string();
    for (const CropWindow& c : windows(full->width, full->height, n_random, static_cast<uint64_t>(hint))) {
      auto region = decode_image_region(jpeg.data(), jpeg.size(), c, o);
      ASSERT_TRUE(region.ok()) << what << " " << name(c) << ": " << region.status().to_string();
      ASSERT_EQ(region->width, c.width);
      ASSERT_EQ(region->height, c.height);
      auto expected = window_of(*full, c);
      ASSERT_EQ(max_abs_diff(*region, expected), 0)
          << what << ", decoded " << full->width << "x" << full->height << ", window " << name(c);
    }
  }
}

// The reference: TurboJPEG's tjDecompress2 (RGB, no flags) at scale 1/d.
Image tj_decode(const std::vector<uint8_t>& jpeg, int d) {
  tjhandle tj = tjInitDecompress();
  int w = 0, h = 0, sub = 0, cs = 0;
  EXPECT_EQ(tjDecompressHeader3(tj, jpeg.data(), jpeg.size(), &w, &h, &sub, &cs), 0);
  const tjscalingfactor f{1, d};
  Image img(TJSCALED(w, f), TJSCALED(h, f));
  EXPECT_EQ(tjDecompress2(tj, jpeg.data(), jpeg.size(), img.rgb.data(), img.width, 0, img.height, TJPF_RGB, 0), 0)
      << tjGetErrorStr2(tj);
  tjDestroy(tj);
  return img;
}

// Whole images through our libjpeg path equal TurboJPEG's decode (what decode_image used before), at every scale.
TEST(ImageRegion, WholeImageDecodeEqualsTurboJpeg) {
  for (int subsamp : {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_440, TJSAMP_411, TJSAMP_GRAY})
    for (bool progressive : {false, true}) {
      const std::vector<uint8_t> jpeg = tj_encode(busy_image(251, 163, 9), subsamp, progressive);
      for (int d : {1, 2, 4, 8}) {
        ImageDecodeOptions o;
        if (d > 1) o.min_width = o.min_height = 163 / d;
        ASSERT_EQ(decode_scale_denominator(*read_image_info(jpeg.data(), jpeg.size()), o), d);
        auto ours = decode_image(jpeg, "", o);
        ASSERT_TRUE(ours.ok()) << ours.status().to_string();
        const Image ref = tj_decode(jpeg, d);
        ASSERT_EQ(ours->width, ref.width);
        ASSERT_EQ(ours->height, ref.height);
        EXPECT_EQ(max_abs_diff(*ours, ref), 0) << "subsampling " << subsamp << " progressive " << progressive
                                               << " scale 1/" << d;
      }
    }
  for (const char* f : {"a_420.jpg", "b_444.jpg", "c_gray.jpg", "d_tiny.jpg", "e_422.jpg"}) {
    const std::vector<uint8_t> jpeg = testing::read_bytes(str(VLM_DATA_FIXTURES, "/pipeline/", f));
    EXPECT_EQ(max_abs_diff(*decode_image(jpeg), tj_decode(jpeg, 1)), 0) << f;
  }
}

TEST(ImageRegion, JpegWindowsEqualTheFullDecodeForEverySubsampling) {
  const struct {
    int subsamp;
    const char* name;
  } kinds[] = {{TJSAMP_444, "4:4:4"}, {TJSAMP_422, "4:2:2"}, {TJSAMP_420, "4:2:0"}, {TJSAMP_440, "4:4:0"},
               {TJSAMP_411, "4:1:1"}, {TJSAMP_GRAY, "gray"}};
  // Sizes that are and are not multiples of the iMCU, wide and tall.
  const int sizes[][2] = {{333, 217}, {97, 301}, {17, 9}};
  for (const auto& k : kinds)
    for (bool progressive : {false, true})
      for (const auto& s : sizes) {
        const Image img = busy_image(s[0], s[1], static_cast<uint64_t>(s[0] * 7 + k.subsamp));
        expect_regions_match(tj_encode(img, k.subsamp, progressive),
                             str(k.name, progressive ? " progressive " : " baseline ", s[0], "x", s[1]), 12);
      }
}

TEST(ImageRegion, RealJpegFixturesAndPhotos) {
  int n = 0;
  for (const char* f : {"a_420.jpg", "b_444.jpg", "c_gray.jpg", "d_tiny.jpg", "e_422.jpg"}) {
    expect_regions_match(testing::read_bytes(str(VLM_DATA_FIXTURES, "/pipeline/", f)), f, 60);
    ++n;
  }
  // Debian's python3-skimage sample photos, when installed (scripts/install_deps.sh).
  std::error_code ec;
  const std::string skimage = testing::skimage_data_dir();
  for (const auto& e : std::filesystem::directory_iterator(skimage.empty() ? "/nonexistent" : skimage, ec)) {
    const std::string p = e.path().string();
    if (e.path().extension() != ".jpg" || p.find("truncated") != std::string::npos) continue;
    expect_regions_match(testing::read_bytes(p), p, 8, {0, 4});  // up to 1411 x 1411: fewer windows
    ++n;
  }
  EXPECT_GE(n, 5);
}

TEST(ImageRegion, TruncatedAndCorruptJpegsFailAsTheFullDecodeDoes) {
  const std::vector<uint8_t> jpeg = tj_encode(busy_image(200, 160, 3), TJSAMP_420, false);
  // Cut at many points: the region decode of a window in the top-left corner (whose rows are intact for late
  // cuts) succeeds exactly when the full decode does, with the same error code.
  for (size_t cut : {jpeg.size() - 2, jpeg.size() - 1, jpeg.size() * 9 / 10, jpeg.size() / 2, jpeg.size() / 5,
                     size_t{300}, size_t{40}}) {
    const std::vector<uint8_t> bad(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(cut));
    auto full = decode_image(bad);
    auto region = decode_image_region(bad.data(), bad.size(), CropWindow{0, 0, 32, 16});
    ASSERT_EQ(full.ok(), region.ok()) << "cut at " << cut << ": full "
                                      << (full.ok() ? "ok" : full.status().to_string()) << ", region "
                                      << (region.ok() ? "ok" : region.status().to_string());
    if (!full.ok()) {
      EXPECT_EQ(full.status().code(), region.status().code()) << region.status().to_string();
      EXPECT_NE(region.status().message().find("JPEG"), std::string::npos) << region.status().to_string();
    }
  }
  // Corrupt entropy-coded data (bytes changed after the headers): windows at the top, in the middle and at the
  // bottom get the same verdict as the whole image; when it decodes, their pixels match it.
  Philox rng(11, 0);
  int rejected = 0;
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<uint8_t> bad = jpeg;
    for (int k = 0; k < 4; ++k) {
      const size_t pos = 600 + rng.uniform_int(bad.size() - 700);
      bad[pos] = static_cast<uint8_t>(bad[pos] ^ (1 + rng.uniform_int(255)));
    }
    auto full = decode_image(bad);
    rejected += !full.ok();
    for (const CropWindow& c : {CropWindow{0, 0, 40, 20}, CropWindow{150, 100, 50, 60}, CropWindow{0, 150, 200, 10}}) {
      auto region = decode_image_region(bad.data(), bad.size(), c);
      ASSERT_EQ(full.ok(), region.ok()) << "trial " << trial << " " << name(c) << ": "
                                        << (full.ok() ? region.status().to_string() : full.status().to_string());
      if (full.ok()) {
        EXPECT_EQ(max_abs_diff(*region, window_of(*full, c)), 0) << "trial " << trial;
      } else {
        EXPECT_EQ(full.status().message(), region.status().message());
      }
    }
  }
  EXPECT_GT(rejected, 0);
}

TEST(ImageRegion, BadRegionsOtherFormatsCmykAndBombs) {
  const Image img = busy_image(40, 30, 5);
  const std::vector<uint8_t> jpeg = *encode_jpeg(img, 90);
  for (const CropWindow& c : {CropWindow{0, 0, 0, 5}, CropWindow{-1, 0, 5, 5}, CropWindow{36, 0, 5, 5},
                              CropWindow{0, 26, 5, 5}, CropWindow{0, 0, 41, 30}}) {
    for (const auto& bytes : {jpeg, *encode_png(img), *encode_webp(img, 90.f, true)}) {
      auto r = decode_image_region(bytes.data(), bytes.size(), c);
      ASSERT_FALSE(r.ok()) << name(c);
      EXPECT_EQ(r.status().code(), StatusCode::invalid_argument) << r.status().to_string();
      EXPECT_NE(r.status().message().find("not inside"), std::string::npos) << r.status().to_string();
    }
  }
  // At scale 1/2 the decoded image is 20x15: a window past it is rejected, one inside it matches.
  ImageDecodeOptions half;
  half.min_width = half.min_height = 10;
  EXPECT_FALSE(decode_image_region(jpeg.data(), jpeg.size(), CropWindow{0, 0, 21, 15}, half).ok());
  auto r = decode_image_region(jpeg.data(), jpeg.size(), CropWindow{5, 5, 15, 10}, half);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(max_abs_diff(*r, window_of(*decode_image(jpeg, "", half), CropWindow{5, 5, 15, 10})), 0);
  // PNG and WebP: decoded whole, then cropped.
  for (const auto& bytes : {*encode_png(img), *encode_webp(img, 90.f, true)}) {
    auto p = decode_image_region(bytes.data(), bytes.size(), CropWindow{3, 4, 20, 11});
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(max_abs_diff(*p, window_of(img, CropWindow{3, 4, 20, 11})), 0);
  }
  // CMYK (TurboJPEG's own conversion path): decoded whole, then cropped.
  std::vector<uint8_t> cmyk(40 * 30 * 4);
  for (size_t i = 0; i < cmyk.size(); ++i) cmyk[i] = static_cast<uint8_t>(i * 13 % 251);
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  ASSERT_EQ(tjCompress2(tj, cmyk.data(), 40, 0, 30, TJPF_CMYK, &out, &size, TJSAMP_444, 95, 0), 0);
  const std::vector<uint8_t> cmyk_jpeg(out, out + size);
  tjFree(out);
  tjDestroy(tj);
  auto c = decode_image_region(cmyk_jpeg.data(), cmyk_jpeg.size(), CropWindow{7, 3, 20, 20});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(max_abs_diff(*c, window_of(*decode_image(cmyk_jpeg), CropWindow{7, 3, 20, 20})), 0);
  // The pixel limit is checked from the header, before any pixel.
  ImageDecodeOptions small;
  small.max_pixels = 40 * 30 - 1;
  auto bomb = decode_image_region(jpeg.data(), jpeg.size(), CropWindow{0, 0, 4, 4}, small);
  ASSERT_FALSE(bomb.ok());
  EXPECT_NE(bomb.status().message().find("decompression bomb"), std::string::npos) << bomb.status().to_string();
}

// random_resized_crop through the pipeline: region decode on and off give the same bytes and the same plan, for
// drawn windows and windows at the edges, with and without DCT scaling, both filters.
TEST(ImageRegion, RandomResizedCropPipelineIsUnchangedByRegionDecode) {
  std::vector<std::vector<uint8_t>> files = {tj_encode(busy_image(520, 390, 1), TJSAMP_420, false),
                                             tj_encode(busy_image(301, 457, 2), TJSAMP_422, true),
                                             tj_encode(busy_image(1100, 700, 3), TJSAMP_444, false, 80)};
  files.push_back(testing::read_bytes(str(VLM_DATA_FIXTURES, "/pipeline/a_420.jpg")));
  files.push_back(*encode_png(busy_image(90, 70, 4)));
  int compared = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    const auto info = *read_image_info(files[f].data(), files[f].size());
    for (bool dct : {false, true})
      for (ResizeFilter filter : {ResizeFilter::bicubic, ResizeFilter::bilinear}) {
        if (filter == ResizeFilter::bilinear && f != 0) continue;  // the filter only changes the resize
        ImagePipelineOptions o;
        o.size = f == 2 ? 96 : 64;
        o.mode = ImageResizeMode::random_resized_crop;
        o.dct_scaling = dct;
        o.filter = filter;
        ImagePipelineOptions whole = o;
        whole.region_decode = false;
        std::vector<CropWindow> wins = windows(info.width, info.height, 0, 0);
        Philox rng(f, dct);
        for (int i = 0; i < 24; ++i)
          wins.push_back(random_resized_crop_window(info.width, info.height, 0.08f, 1.f, 0.75f, 4.f / 3.f, rng));
        for (const CropWindow& c : wins) {
          ImagePlan pa, pb;
          auto a = image_pipeline_pixels(files[f].data(), files[f].size(), o, c, &pa);
          auto b = image_pipeline_pixels(files[f].data(), files[f].size(), whole, c, &pb);
          ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string() << " / " << b.status().to_string();
          ASSERT_EQ(max_abs_diff(*a, *b), 0) << "file " << f << " dct " << dct << " window " << name(c);
          EXPECT_EQ(pa.scale_denominator, pb.scale_denominator);
          EXPECT_EQ(pa.decoded_width, pb.decoded_width);
          EXPECT_EQ(pa.decoded_height, pb.decoded_height);
          EXPECT_EQ(pa.window, pb.window);
          ++compared;
        }
      }
  }
  EXPECT_EQ(compared, (5 * 2 + 2) * 31);
}

}  // namespace
}  // namespace vlm
