// Image pipeline: DCT-scaled JPEG decode and every mode against Pillow's draft() + resize(box) outputs
// (dev/fixtures/make_pipeline_fixtures.py), the path without DCT scaling bit-exact against decode + transforms, mode
// geometry (sizes, padding colour, crop windows), random-resized-crop determinism, bomb rejection, errors; and the
// resize kernels (AVX2 == plain loops, views == copies).
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <set>

#include "data/image/image_pipeline.h"
#include "data/io/webdataset.h"
#include "data_test_util.h"

namespace vlm {
namespace {

using testing::max_abs_diff;
using testing::mean_abs_diff;
using testing::test_image;

std::string fixture_path(const std::string& name) { return str(VLM_DATA_FIXTURES, "/pipeline/", name); }

std::vector<uint8_t> fixture_bytes(const std::string& name) { return testing::read_bytes(fixture_path(name)); }

Image fixture_png(const std::string& name) {
  auto img = decode_image(fixture_bytes(name), "png");
  VLM_CHECK(img.ok(), img.status().to_string());
  return std::move(img).value();
}

nlohmann::json manifest() {
  auto m = nlohmann::json::parse(testing::read_bytes(fixture_path("manifest.json")));
  VLM_CHECK(m["cases"].size() >= 20u, "pipeline fixtures: too few cases");
  return m;
}

ImagePipelineOptions options_for(const nlohmann::json& c) {
  ImagePipelineOptions o;
  o.size = c["size"];
  o.filter = c["filter"] == "bilinear" ? ResizeFilter::bilinear : ResizeFilter::bicubic;
  o.dct_scaling = c["dct"];
  const std::string op = c["op"];
  o.mode = op == "center_crop" ? ImageResizeMode::center_crop
           : op == "border"    ? ImageResizeMode::border_pad
                               : ImageResizeMode::random_resized_crop;
  return o;
}

TEST(ImagePipeline, DctScaledDecodeMatchesPillowDraft) {
  int n = 0, worst = 0;
  std::set<int> denominators;
  const nlohmann::json m = manifest();
  for (const auto& c : m["cases"]) {
    if (c["op"] != "draft") continue;
    const std::string out = c["out"];
    SCOPED_TRACE(out);
    const auto bytes = fixture_bytes(c["src"]);
    ImageDecodeOptions opt;
    opt.min_width = c["min_width"];
    opt.min_height = c["min_height"];
    auto img = decode_image(bytes, "jpg", opt);
    ASSERT_TRUE(img.ok()) << img.status().to_string();
    const Image expected = fixture_png(out);
    ASSERT_EQ(img->width, expected.width);
    ASSERT_EQ(img->height, expected.height);
    auto info = read_image_info(bytes.data(), bytes.size());
    ASSERT_TRUE(info.ok());
    const int d = decode_scale_denominator(*info, opt);
    EXPECT_EQ(img->width, (info->width + d - 1) / d);
    EXPECT_GE(img->width, opt.min_width);  // never below the hint
    EXPECT_GE(img->height, opt.min_height);
    denominators.insert(d);
    const int diff = max_abs_diff(*img, expected);
    EXPECT_LE(diff, 2);
    EXPECT_LE(mean_abs_diff(*img, expected), 0.05);
    worst = std::max(worst, diff);
    ++n;
  }
  EXPECT_EQ(n, 6);
  EXPECT_EQ(denominators, (std::set<int>{1, 2, 4, 8}));
  RecordProperty("max_abs_diff_vs_pillow_draft", worst);
}

TEST(ImagePipeline, ModesMatchPillow) {
  int n = 0, worst = 0;
  std::set<std::string> ops;
  const nlohmann::json m = manifest();
  for (const auto& c : m["cases"]) {
    if (c["op"] == "draft") continue;
    const std::string out = c["out"];
    SCOPED_TRACE(out);
    const auto bytes = fixture_bytes(c["src"]);
    const ImagePipelineOptions o = options_for(c);
    ImagePlan plan;
    Expected<Image> got = Status(StatusCode::internal, "unset");
    if (o.mode == ImageResizeMode::random_resized_crop) {
      const auto& w = c["window"];
      got = image_pipeline_pixels(bytes.data(), bytes.size(), o, CropWindow{w[0], w[1], w[2], w[3]}, &plan);
    } else {
      got = image_pipeline_pixels(bytes.data(), bytes.size(), o, nullptr, &plan);
    }
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(plan.scale_denominator, c["scale"].get<int>());
    const Image expected = fixture_png(out);
    ASSERT_EQ(got->width, o.size);
    ASSERT_EQ(got->height, o.size);
    const int diff = max_abs_diff(*got, expected);
    EXPECT_LE(diff, 2);
    EXPECT_LE(mean_abs_diff(*got, expected), 0.05);
    worst = std::max(worst, diff);
    ops.insert(c["op"]);
    ++n;
  }
  EXPECT_GE(n, 17);
  EXPECT_EQ(ops, (std::set<std::string>{"center_crop", "border", "rrc"}));
  RecordProperty("max_abs_diff_vs_pillow", worst);
}

// The images the non-DCT tests run on: fixture JPEGs (4:2:0, 4:4:4, gray, 4:2:2, tiny), a PNG and a WebP.
std::vector<std::pair<std::string, std::vector<uint8_t>>> inputs() {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> v;
  for (const char* name : {"a_420.jpg", "b_444.jpg", "c_gray.jpg", "d_tiny.jpg", "e_422.jpg"})
    v.emplace_back(name, fixture_bytes(name));
  v.emplace_back("png", *encode_png(test_image(97, 61, 3)));
  v.emplace_back("webp", *encode_webp(test_image(64, 90, 5), 90.f));
  return v;
}

TEST(ImagePipeline, WithoutDctScalingEqualsDecodeThenTransforms) {
  const float mean[3] = {0.48f, 0.45f, 0.40f}, stdv[3] = {0.27f, 0.26f, 0.28f};
  for (const auto& [name, bytes] : inputs()) {
    SCOPED_TRACE(name);
    const Image full = *decode_image(bytes);
    for (int size : {24, 57}) {
      ImagePipelineOptions o;
      o.size = size;
      o.dct_scaling = false;
      std::copy(mean, mean + 3, o.mean);
      std::copy(stdv, stdv + 3, o.std);
      for (ResizeFilter f : {ResizeFilter::bicubic, ResizeFilter::bilinear}) {
        o.filter = f;
        o.mode = ImageResizeMode::center_crop;
        auto c = image_pipeline_pixels(bytes.data(), bytes.size(), o);
        ASSERT_TRUE(c.ok()) << c.status().to_string();
        const Image ref = resize_shorter_then_center_crop(full, size, f);
        EXPECT_EQ(c->rgb, ref.rgb);
        // The normalized output is exactly to_chw_normalized of those pixels.
        std::vector<float> got(3 * size * size, -7.f), want(3 * size * size);
        ASSERT_TRUE(image_pipeline_run(bytes.data(), bytes.size(), o, nullptr, got.data()).ok());
        to_chw_normalized(ref, mean, stdv, want.data());
        EXPECT_EQ(got, want);

        o.mode = ImageResizeMode::border_pad;
        auto b = image_pipeline_pixels(bytes.data(), bytes.size(), o);
        ASSERT_TRUE(b.ok()) << b.status().to_string();
        EXPECT_EQ(b->rgb, resize_longer_then_pad(full, size, o.pad_rgb, f).rgb);

        // torchvision's order: crop, then resize.
        o.mode = ImageResizeMode::random_resized_crop;
        const CropWindow win{full.width / 5, full.height / 7, full.width / 2, full.height / 2 + 1};
        auto r = image_pipeline_pixels(bytes.data(), bytes.size(), o, win);
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        EXPECT_EQ(r->rgb, resize_to(crop(full, win.x, win.y, win.width, win.height), size, size, f).rgb);
      }
    }
  }
}

TEST(ImagePipeline, DctScalingOnlyWhenTheSourceIsLargeEnough) {
  for (const auto& [name, bytes] : inputs()) {
    SCOPED_TRACE(name);
    const Image full = *decode_image(bytes);
    ImagePipelineOptions o;
    o.size = 24;
    ImagePlan plan;
    auto img = image_pipeline_pixels(bytes.data(), bytes.size(), o, nullptr, &plan);
    ASSERT_TRUE(img.ok()) << img.status().to_string();
    EXPECT_EQ(plan.source.width, full.width);
    const bool jpeg = plan.source.format == ImageFormat::jpeg;
    const int shorter = std::min(full.width, full.height);
    // Denominator: the largest power of two d <= 8 with shorter / d >= 24 (JPEG only).
    int d = 1;
    while (jpeg && d < 8 && shorter >= 2 * d * 24) d *= 2;
    EXPECT_EQ(plan.scale_denominator, d);
    EXPECT_EQ(plan.decoded_width, (full.width + d - 1) / d);
    if (d == 1) {
      EXPECT_EQ(img->rgb, resize_shorter_then_center_crop(full, 24).rgb);
    }
    // A DCT-scaled result still looks like the full-decode one (it is a different antialiasing prefilter).
    EXPECT_LT(mean_abs_diff(*img, resize_shorter_then_center_crop(full, 24)), 4.0);
  }
}

TEST(ImagePipeline, DenominatorAgreesWithTheDecoderForEverySmallSize) {
  // TurboJPEG picks its own factor from the requested size; for a few tiny sizes it would not be 1/d, and the
  // denominator must then back off so the decoded size is always ceil(size / d).
  for (int w = 1; w <= 40; w += 3)
    for (int h : {1, 2, 3, 5, 9, 17, 33}) {
      const auto bytes = *encode_jpeg(test_image(w, h, 1), 80);
      const ImageInfo info = *read_image_info(bytes.data(), bytes.size());
      for (int hint : {1, 2, 3, 4}) {
        ImageDecodeOptions opt;
        opt.min_width = opt.min_height = hint;
        const int d = decode_scale_denominator(info, opt);
        const Image img = *decode_image(bytes, "", opt);
        ASSERT_EQ(img.width, (w + d - 1) / d) << w << "x" << h << " hint " << hint;
        ASSERT_EQ(img.height, (h + d - 1) / d) << w << "x" << h << " hint " << hint;
        ASSERT_GE(img.width, std::min(hint, w));
      }
    }
}

TEST(ImagePipeline, HintIgnoredByPngAndWebp) {
  const Image src = test_image(200, 120, 2);
  ImageDecodeOptions opt;
  opt.min_width = opt.min_height = 20;
  for (const auto& bytes : {*encode_png(src), *encode_webp(src, 0.f, true)}) {
    const ImageInfo info = *read_image_info(bytes.data(), bytes.size());
    EXPECT_EQ(decode_scale_denominator(info, opt), 1);
    const Image img = *decode_image(bytes, "", opt);
    EXPECT_EQ(img.width, 200);
    EXPECT_EQ(img.rgb, src.rgb);
  }
  // JPEG honours it: 120 < 8 * 20, and 4 * 20 fits both sides.
  const auto jpeg = *encode_jpeg(src, 90);
  EXPECT_EQ(decode_image(jpeg, "", opt)->width, 50);
}

TEST(ImagePipeline, CenterCropGeometryAndWindow) {
  const auto bytes = *encode_png(test_image(90, 30, 1));
  ImagePipelineOptions o;
  o.size = 20;
  ImagePlan plan;
  auto img = image_pipeline_pixels(bytes.data(), bytes.size(), o, nullptr, &plan);
  ASSERT_TRUE(img.ok());
  EXPECT_EQ(img->width, 20);
  EXPECT_EQ(img->height, 20);
  // 90x30 -> 60x20, crop x from round(40 / 2) = 20: the source window is x 30..60 (scale 1.5).
  EXPECT_EQ(plan.window, (CropWindow{30, 0, 30, 30}));
  EXPECT_EQ(img->rgb, resize_crop(test_image(90, 30, 1), 60, 20, 20, 0, 20, 20).rgb);
}

TEST(ImagePipeline, BorderPadsWithTheColourAndCentres) {
  const Image src = test_image(80, 40, 6);
  const auto bytes = *encode_png(src);
  ImagePipelineOptions o;
  o.mode = ImageResizeMode::border_pad;
  o.pad_rgb[0] = 10, o.pad_rgb[1] = 20, o.pad_rgb[2] = 30;
  const auto is_pad_row = [&](const Image& img, int y) {
    for (int x = 0; x < img.width; ++x)
      if (img.pixel(x, y)[0] != 10 || img.pixel(x, y)[1] != 20 || img.pixel(x, y)[2] != 30) return false;
    return true;
  };
  // 33: the longer side 80 -> 33, the shorter 40 * 33 / 80 = 16.5 -> 16 (half to even); top 8, bottom 9.
  o.size = 33;
  auto img = image_pipeline_pixels(bytes.data(), bytes.size(), o);
  ASSERT_TRUE(img.ok());
  for (int y = 0; y < 33; ++y) EXPECT_EQ(is_pad_row(*img, y), y < 8 || y >= 24) << "row " << y;
  EXPECT_EQ(border_geometry(80, 40, 33).resize_height, 16);
  EXPECT_EQ(crop(*img, 0, 8, 33, 16).rgb, resize_to(src, 33, 16).rgb);
  // Portrait: padding on the left and right; the default colour is white.
  const auto tall = *encode_png(test_image(30, 64, 2));
  ImagePipelineOptions w;
  w.mode = ImageResizeMode::border_pad;
  w.size = 32;
  auto t = image_pipeline_pixels(tall.data(), tall.size(), w);
  ASSERT_TRUE(t.ok());
  // 30 * 32 / 64 = 15 columns, left = (32 - 15) / 2 = 8.
  for (int y = 0; y < 32; ++y)
    for (int x : {0, 7, 23, 31}) EXPECT_EQ(t->pixel(x, y)[0] + t->pixel(x, y)[1] + t->pixel(x, y)[2], 765);
  EXPECT_EQ(crop(*t, 8, 0, 15, 32).rgb, resize_to(test_image(30, 64, 2), 15, 32).rgb);
}

TEST(ImagePipeline, RandomResizedCropIsDeterministicPerStream) {
  const auto bytes = fixture_bytes("a_420.jpg");
  ImagePipelineOptions o;
  o.mode = ImageResizeMode::random_resized_crop;
  o.size = 32;
  std::set<std::tuple<int, int, int, int>> windows;
  for (uint64_t sample = 0; sample < 12; ++sample) {
    Philox a(1234, sample), b(1234, sample);
    ImagePlan pa, pb;
    std::vector<float> xa(3 * 32 * 32), xb(3 * 32 * 32);
    ASSERT_TRUE(image_pipeline_run(bytes.data(), bytes.size(), o, &a, xa.data(), &pa).ok());
    ASSERT_TRUE(image_pipeline_run(bytes.data(), bytes.size(), o, &b, xb.data(), &pb).ok());
    EXPECT_EQ(pa.window, pb.window);
    EXPECT_EQ(xa, xb);
    Philox c(1234, sample);
    EXPECT_EQ(pa.window, random_resized_crop_window(520, 390, 0.08f, 1.f, 0.75f, 4.f / 3.f, c));
    const CropWindow& w = pa.window;
    EXPECT_TRUE(w.x >= 0 && w.y >= 0 && w.x + w.width <= 520 && w.y + w.height <= 390);
    const double frac = static_cast<double>(w.width) * w.height / (520.0 * 390.0);
    EXPECT_GT(frac, 0.07);
    EXPECT_LE(frac, 1.0);
    const double ratio = static_cast<double>(w.width) / w.height;
    EXPECT_GT(ratio, 0.7);
    EXPECT_LT(ratio, 1.42);
    windows.insert({w.x, w.y, w.width, w.height});
  }
  EXPECT_GE(windows.size(), 11u) << "different samples must get different windows";
  // A different seed gives a different window for the same sample.
  Philox s1(1, 0), s2(2, 0);
  EXPECT_NE(random_resized_crop_window(520, 390, 0.08f, 1.f, 0.75f, 4.f / 3.f, s1),
            random_resized_crop_window(520, 390, 0.08f, 1.f, 0.75f, 4.f / 3.f, s2));
}

TEST(ImagePipeline, RandomResizedCropFallsBackToTheClampedCentre) {
  Philox rng(5);
  // A full-area crop with aspect 2..3 never fits a square: the fallback keeps the width and clamps the ratio.
  EXPECT_EQ(random_resized_crop_window(100, 100, 1.f, 1.f, 2.f, 3.f, rng), (CropWindow{0, 25, 100, 50}));
  // A wide image with a ratio range below its own: height kept, width = round(40 * 1.5) = 60.
  EXPECT_EQ(random_resized_crop_window(200, 40, 1.f, 1.f, 1.f, 1.5f, rng), (CropWindow{70, 0, 60, 40}));
  // Ratio range containing the image's own: the whole image.
  EXPECT_EQ(random_resized_crop_window(60, 50, 1.f, 1.f, 1.2f, 1.2f, rng), (CropWindow{0, 0, 60, 50}));
}

// A JPEG whose SOF0 claims 30000 x 30000.
std::vector<uint8_t> jpeg_bomb() {
  std::vector<uint8_t> jpeg = *encode_jpeg(test_image(16, 16), 90);
  for (size_t i = 2; i + 8 < jpeg.size(); ++i)
    if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xC0) {
      jpeg[i + 5] = 30000 >> 8;
      jpeg[i + 6] = 30000 & 0xff;
      jpeg[i + 7] = 30000 >> 8;
      jpeg[i + 8] = 30000 & 0xff;
      return jpeg;
    }
  VLM_FAIL("no SOF0 marker");
}

TEST(ImagePipeline, BombsRejectedFromTheHeader) {
  const auto bomb = jpeg_bomb();
  for (ImageResizeMode mode :
       {ImageResizeMode::center_crop, ImageResizeMode::border_pad, ImageResizeMode::random_resized_crop}) {
    ImagePipelineOptions o;
    o.mode = mode;
    Philox rng(1);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = image_pipeline_pixels(bomb.data(), bomb.size(), o, &rng);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(r.status().message().find("900000000 pixels exceeds the limit"), std::string::npos)
        << r.status().message();
    EXPECT_LT(ms, 200.0) << "rejected before any pixel memory";
  }
  // The limit is configurable, and applies to the source size (not the DCT-scaled one).
  const auto small = *encode_jpeg(test_image(64, 64), 90);
  ImagePipelineOptions o;
  o.size = 8;
  o.max_pixels = 64 * 64 - 1;
  EXPECT_EQ(image_pipeline_pixels(small.data(), small.size(), o).status().code(), StatusCode::invalid_argument);
  o.max_pixels = 64 * 64;
  EXPECT_TRUE(image_pipeline_pixels(small.data(), small.size(), o).ok());
}

TEST(ImagePipeline, ErrorsAreStatuses) {
  const auto good = *encode_jpeg(test_image(40, 30), 90);
  ImagePipelineOptions o;
  o.size = 16;
  const std::vector<uint8_t> junk = {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'};
  EXPECT_EQ(image_pipeline_pixels(junk.data(), junk.size(), o).status().code(), StatusCode::parse_error);
  std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<long>(good.size() / 2));
  EXPECT_EQ(image_pipeline_pixels(cut.data(), cut.size(), o).status().code(), StatusCode::parse_error);
  ImagePipelineOptions bad = o;
  bad.size = 0;
  EXPECT_EQ(image_pipeline_pixels(good.data(), good.size(), bad).status().code(), StatusCode::invalid_argument);
  bad = o;
  bad.std[1] = 0.f;
  EXPECT_NE(image_pipeline_pixels(good.data(), good.size(), bad).status().message().find("std[1]"),
            std::string::npos);
  bad = o;
  bad.crop_scale[0] = 0.f;
  EXPECT_EQ(bad.validate().code(), StatusCode::invalid_argument);
  ImagePipelineOptions rrc = o;
  rrc.mode = ImageResizeMode::random_resized_crop;
  EXPECT_NE(image_pipeline_pixels(good.data(), good.size(), rrc).status().message().find("rng is null"),
            std::string::npos);
  EXPECT_EQ(image_pipeline_pixels(good.data(), good.size(), rrc, CropWindow{30, 0, 20, 10}).status().code(),
            StatusCode::invalid_argument);
  EXPECT_EQ(*parse_image_resize_mode("border"), ImageResizeMode::border_pad);
  EXPECT_EQ(*parse_image_resize_mode("rrc"), ImageResizeMode::random_resized_crop);
  EXPECT_FALSE(parse_image_resize_mode("stretch").ok());
}

TEST(ImagePipeline, TensorAndSampleForms) {
  const auto bytes = fixture_bytes("e_422.jpg");
  ImagePipelineOptions o;
  o.size = 40;
  auto t = image_pipeline_tensor(bytes.data(), bytes.size(), o);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->shape(), (Shape{3, 40, 40}));
  std::vector<float> direct(3 * 40 * 40);
  ASSERT_TRUE(image_pipeline_run(bytes.data(), bytes.size(), o, nullptr, direct.data()).ok());
  EXPECT_TRUE(std::equal(direct.begin(), direct.end(), t->data<float>()));

  WebDatasetSample s;
  s.shard = "shard-7.tar";
  s.key = "000123";
  s.fields["txt"] = {'h', 'i'};
  s.fields["webp"] = bytes;  // mislabelled: sniffing decides the format
  std::vector<float> via_sample(3 * 40 * 40);
  ASSERT_TRUE(image_pipeline_sample(s, o, nullptr, via_sample.data()).ok());
  EXPECT_EQ(via_sample, direct);
  s.fields["webp"].resize(100);
  const Status bad = image_pipeline_sample(s, o, nullptr, via_sample.data());
  EXPECT_NE(bad.message().find("shard-7.tar: sample '000123' field 'webp'"), std::string::npos) << bad.message();
  s.fields.erase("webp");
  EXPECT_EQ(image_pipeline_sample(s, o, nullptr, via_sample.data()).code(), StatusCode::not_found);
}

// ---- resize kernels ----

// Restores the SIMD setting at scope exit.
struct SimdSetting {
  bool previous;
  explicit SimdSetting(bool on) : previous(detail::resize_set_simd(on)) {}
  ~SimdSetting() { detail::resize_set_simd(previous); }
};

TEST(ResizeKernels, SimdEqualsPlainLoops) {
  if (!detail::resize_simd_available()) GTEST_SKIP() << "no AVX2 on this CPU: only the plain loops run";
  Philox rng(99);
  for (int t = 0; t < 150; ++t) {
    const int w = 1 + static_cast<int>(rng.uniform_int(180)), h = 1 + static_cast<int>(rng.uniform_int(180));
    Image img(w, h);
    for (auto& v : img.rgb) v = static_cast<uint8_t>(rng.next_u32() >> 24);
    const int rw = 1 + static_cast<int>(rng.uniform_int(150)), rh = 1 + static_cast<int>(rng.uniform_int(150));
    const ResizeFilter f = t % 2 ? ResizeFilter::bilinear : ResizeFilter::bicubic;
    // A view of a window and a fractional box inside it.
    const int vx = static_cast<int>(rng.uniform_int(static_cast<uint64_t>(w))),
              vy = static_cast<int>(rng.uniform_int(static_cast<uint64_t>(h)));
    const ImageView view = image_view(img, vx, vy, w - vx, h - vy);
    const ResizeBox box{0.25f * static_cast<float>(rng.uniform_int(2)), 0.5f * static_cast<float>(rng.uniform_int(2)),
                        static_cast<float>(view.width), static_cast<float>(view.height) - 0.25f * (view.height > 1)};
    Image a, b, c, d;
    {
      SimdSetting off(false);
      a = resize_to(img, rw, rh, f);
      c = resize_box(view, box, rw, rh, f);
    }
    {
      SimdSetting on(true);
      b = resize_to(img, rw, rh, f);
      d = resize_box(view, box, rw, rh, f);
    }
    ASSERT_EQ(a.rgb, b.rgb) << w << "x" << h << " -> " << rw << "x" << rh;
    ASSERT_EQ(c.rgb, d.rgb) << "view " << view.width << "x" << view.height << " -> " << rw << "x" << rh;
  }
}

TEST(ResizeKernels, ViewEqualsCopiedCropAndBoxOfWholeImageEqualsResize) {
  const Image img = test_image(70, 50, 8);
  for (ResizeFilter f : {ResizeFilter::bilinear, ResizeFilter::bicubic}) {
    const Image copy = crop(img, 11, 7, 41, 30);
    EXPECT_EQ(resize_box(image_view(img, 11, 7, 41, 30), ResizeBox{0.f, 0.f, 41.f, 30.f}, 23, 19, f).rgb,
              resize_to(copy, 23, 19, f).rgb);
    EXPECT_EQ(resize_box(image_view(img), ResizeBox{0.f, 0.f, 70.f, 50.f}, 33, 21, f).rgb,
              resize_to(img, 33, 21, f).rgb);
    // A box that is the identity size but shifted still filters (Pillow runs the pass): an integer shift copies.
    EXPECT_EQ(resize_box(image_view(img), ResizeBox{5.f, 0.f, 45.f, 50.f}, 40, 50, f).rgb,
              crop(img, 5, 0, 40, 50).rgb);
  }
}

}  // namespace
}  // namespace vlm
