// Encoded image -> normalized CHW floats in one call (see image_pipeline.h).
#include "data/image/image_pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "data/io/webdataset.h"

namespace vlm {

const char* image_resize_mode_name(ImageResizeMode mode) {
  switch (mode) {
    case ImageResizeMode::center_crop: return "center_crop";
    case ImageResizeMode::border_pad: return "border_pad";
    case ImageResizeMode::random_resized_crop: return "random_resized_crop";
  }
  return "?";
}

Expected<ImageResizeMode> parse_image_resize_mode(std::string_view name) {
  if (name == "center_crop") return ImageResizeMode::center_crop;
  if (name == "border_pad" || name == "border") return ImageResizeMode::border_pad;
  if (name == "random_resized_crop" || name == "rrc") return ImageResizeMode::random_resized_crop;
  return invalid_argument(str("unknown image resize mode '", name,
                              "' (expected center_crop, border_pad or random_resized_crop)"));
}

Status ImagePipelineOptions::validate() const {
  if (size < 1 || size > 8192) return invalid_argument(str("image pipeline: size ", size, " not in 1..8192"));
  for (int c = 0; c < 3; ++c)
    if (!(std[c] != 0.f) || !std::isfinite(std[c]) || !std::isfinite(mean[c]))
      return invalid_argument(str("image pipeline: mean[", c, "] = ", mean[c], ", std[", c, "] = ", std[c],
                                  " (std must be finite and non-zero)"));
  if (!(crop_scale[0] > 0.f && crop_scale[0] <= crop_scale[1] && crop_scale[1] <= 1.f))
    return invalid_argument(str("image pipeline: crop_scale [", crop_scale[0], ", ", crop_scale[1],
                                "] must satisfy 0 < lo <= hi <= 1"));
  if (!(crop_ratio[0] > 0.f && crop_ratio[0] <= crop_ratio[1] && std::isfinite(crop_ratio[1])))
    return invalid_argument(str("image pipeline: crop_ratio [", crop_ratio[0], ", ", crop_ratio[1],
                                "] must satisfy 0 < lo <= hi"));
  if (max_pixels == 0) return invalid_argument("image pipeline: max_pixels must be > 0");
  return Status();
}

namespace {

// The smallest n with n * den >= num (num, den > 0).
int ceil_div(int64_t num, int64_t den) { return static_cast<int>((num + den - 1) / den); }

Status check_source(const ImageInfo& info, const ImagePipelineOptions& o) {
  if (info.width <= 0 || info.height <= 0)
    return parse_error(str(image_format_name(info.format), ": bad image size ", info.width, "x", info.height));
  const uint64_t pixels = static_cast<uint64_t>(info.width) * static_cast<uint64_t>(info.height);
  if (pixels > o.max_pixels)
    return invalid_argument(str(image_format_name(info.format), ": ", info.width, "x", info.height, " = ", pixels,
                                " pixels exceeds the limit of ", o.max_pixels, " (possible decompression bomb)"));
  return Status();
}

// Decodes with the size hint and checks the decoder produced the size the plan expects.
Expected<Image> decode_for(const uint8_t* data, size_t size, const ImageInfo& info, const ImagePipelineOptions& o,
                           int min_width, int min_height, ImagePlan& plan) {
  ImageDecodeOptions dopt;
  dopt.max_pixels = o.max_pixels;
  if (o.dct_scaling) {
    dopt.min_width = min_width;
    dopt.min_height = min_height;
  }
  plan.scale_denominator = decode_scale_denominator(info, dopt);
  VLM_ASSIGN_OR_RETURN(Image img, decode_image(data, size, {}, dopt));
  const int d = plan.scale_denominator;
  if (img.width != ceil_div(info.width, d) || img.height != ceil_div(info.height, d))
    return internal_error(str(image_format_name(info.format), ": decoded ", img.width, "x", img.height,
                              ", expected ", info.width, "x", info.height, " / ", d));
  plan.decoded_width = img.width;
  plan.decoded_height = img.height;
  return img;
}

// random_resized_crop at DCT scale d: the whole decoded pixels around the window, [ix0, ix1) x [iy0, iy1) of the
// ceil(w / d) x ceil(h / d) decoded image.
CropWindow decoded_window(const CropWindow& win, int d, int decoded_width, int decoded_height) {
  const float df = static_cast<float>(d);
  const float bx1 = (win.x + win.width) / df, by1 = (win.y + win.height) / df;
  const int ix0 = static_cast<int>(std::floor(win.x / df)), iy0 = static_cast<int>(std::floor(win.y / df));
  const int ix1 = std::min(static_cast<int>(std::ceil(bx1)), decoded_width);
  const int iy1 = std::min(static_cast<int>(std::ceil(by1)), decoded_height);
  return CropWindow{ix0, iy0, ix1 - ix0, iy1 - iy0};
}

struct RegionDecode {
  Image pixels;       // the decoded window
  CropWindow region;  // where it lies in the decoded image
};

// The decoded pixels around `win` only (decode_image_region), at the scale decode_for would use.
Expected<RegionDecode> decode_window(const uint8_t* data, size_t size, const ImageInfo& info,
                                     const ImagePipelineOptions& o, int min_width, int min_height,
                                     const CropWindow& win, ImagePlan& plan) {
  ImageDecodeOptions dopt;
  dopt.max_pixels = o.max_pixels;
  if (o.dct_scaling) {
    dopt.min_width = min_width;
    dopt.min_height = min_height;
  }
  const int d = decode_scale_denominator(info, dopt);
  plan.scale_denominator = d;
  plan.decoded_width = ceil_div(info.width, d);
  plan.decoded_height = ceil_div(info.height, d);
  RegionDecode out;
  out.region = decoded_window(win, d, plan.decoded_width, plan.decoded_height);
  VLM_ASSIGN_OR_RETURN(out.pixels, decode_image_region(data, size, out.region, dopt));
  if (out.pixels.width != out.region.width || out.pixels.height != out.region.height)
    return internal_error(str(image_format_name(info.format), ": decoded a ", out.pixels.width, "x",
                              out.pixels.height, " region, expected ", out.region.width, "x", out.region.height));
  return out;
}

// Resizes the window `win` (source pixels) of an image decoded at scale d to the S x S output. `src` holds the
// decoded image from decoded pixel (src_x, src_y) on (the whole image: 0, 0; a decoded region: its corner).
// Crop (to the whole decoded pixels around the window), then resize the window's exact box inside it: at d = 1
// this is torchvision's crop-then-resize; at d > 1 the box has fractional edges.
void resize_window(const ImageView& src, const CropWindow& win, int d, int src_x, int src_y,
                   const ImagePipelineOptions& o, Image& out) {
  const float df = static_cast<float>(d);
  const float bx0 = win.x / df, by0 = win.y / df, bx1 = (win.x + win.width) / df, by1 = (win.y + win.height) / df;
  const CropWindow c = decoded_window(win, d, src_x + src.width, src_y + src.height);
  ImageView view = src;
  view.data = src.data + static_cast<size_t>(c.y - src_y) * src.stride + static_cast<size_t>(c.x - src_x) * 3;
  view.width = c.width;
  view.height = c.height;
  const ResizeBox box{bx0 - static_cast<float>(c.x), by0 - static_cast<float>(c.y), bx1 - static_cast<float>(c.x),
                      by1 - static_cast<float>(c.y)};
  resize_into(view, box, o.size, o.size, 0, 0, o.size, o.size, o.filter, out.rgb.data(),
              static_cast<size_t>(o.size) * 3);
}

// The pipeline after the header: `window` is used by random_resized_crop only.
Expected<Image> run_planned(const uint8_t* data, size_t size, const ImagePipelineOptions& o, ImagePlan plan,
                            const CropWindow& window, ImagePlan* plan_out) {
  const int w = plan.source.width, h = plan.source.height, s = o.size;
  Image out(s, s);
  const size_t out_stride = static_cast<size_t>(s) * 3;

  switch (o.mode) {
    case ImageResizeMode::center_crop: {
      // The plan is made at the source size; a DCT-scaled image is resized from its box (0, 0, w / d, h / d),
      // which is where the source's pixels lie in it (its last row/column may be partly padding).
      const CenterCropGeometry g = center_crop_geometry(w, h, s, s, s);
      VLM_ASSIGN_OR_RETURN(Image img, decode_for(data, size, plan.source, o, g.resize_width, g.resize_height, plan));
      const float d = static_cast<float>(plan.scale_denominator);
      resize_into(image_view(img), ResizeBox{0.f, 0.f, w / d, h / d}, g.resize_width, g.resize_height, g.x0, g.y0,
                  s, s, o.filter, out.rgb.data(), out_stride);
      const double sx = static_cast<double>(w) / g.resize_width, sy = static_cast<double>(h) / g.resize_height;
      plan.window = CropWindow{static_cast<int>(std::lround(g.x0 * sx)), static_cast<int>(std::lround(g.y0 * sy)),
                               static_cast<int>(std::lround(s * sx)), static_cast<int>(std::lround(s * sy))};
      break;
    }
    case ImageResizeMode::border_pad: {
      const BorderGeometry g = border_geometry(w, h, s);
      VLM_ASSIGN_OR_RETURN(Image img, decode_for(data, size, plan.source, o, g.resize_width, g.resize_height, plan));
      const float d = static_cast<float>(plan.scale_denominator);
      for (size_t i = 0; i < out.rgb.size(); i += 3) std::memcpy(out.rgb.data() + i, o.pad_rgb, 3);
      resize_into(image_view(img), ResizeBox{0.f, 0.f, w / d, h / d}, g.resize_width, g.resize_height, 0, 0,
                  g.resize_width, g.resize_height, o.filter, out.pixel(g.left, g.top), out_stride);
      plan.window = CropWindow{0, 0, w, h};
      break;
    }
    case ImageResizeMode::random_resized_crop: {
      const CropWindow& win = window;
      if (win.x < 0 || win.y < 0 || win.width <= 0 || win.height <= 0 || win.x + win.width > w ||
          win.y + win.height > h)
        return invalid_argument(str("image pipeline: crop window ", win.width, "x", win.height, "+", win.x, "+",
                                    win.y, " outside the ", w, "x", h, " image"));
      // The window must keep >= s pixels along each axis after scaling: d * ceil(s * w / win.width) <= w.
      const int need_w = ceil_div(int64_t{s} * w, win.width), need_h = ceil_div(int64_t{s} * h, win.height);
      if (!o.region_decode) {
        VLM_ASSIGN_OR_RETURN(Image img, decode_for(data, size, plan.source, o, need_w, need_h, plan));
        resize_window(image_view(img), win, plan.scale_denominator, 0, 0, o, out);
      } else {
        // Only the whole decoded pixels around the window are decoded; the resize sees them as its whole source
        // either way (a crop), so the output is the same.
        VLM_ASSIGN_OR_RETURN(RegionDecode rd, decode_window(data, size, plan.source, o, need_w, need_h, win, plan));
        resize_window(image_view(rd.pixels), win, plan.scale_denominator, rd.region.x, rd.region.y, o, out);
      }
      plan.window = win;
      break;
    }
  }
  if (plan_out) *plan_out = plan;
  return out;
}

Expected<ImagePlan> read_plan(const uint8_t* data, size_t size, const ImagePipelineOptions& o) {
  VLM_RETURN_IF_ERROR(o.validate());
  ImagePlan plan;
  VLM_ASSIGN_OR_RETURN(plan.source, read_image_info(data, size));
  VLM_RETURN_IF_ERROR(check_source(plan.source, o));
  return plan;
}

}  // namespace

Expected<Image> image_pipeline_pixels(const uint8_t* data, size_t size, const ImagePipelineOptions& o, Philox* rng,
                                      ImagePlan* plan_out) {
  if (o.mode == ImageResizeMode::random_resized_crop && rng == nullptr)
    return invalid_argument("image pipeline: random_resized_crop needs a random stream (rng is null)");
  VLM_ASSIGN_OR_RETURN(ImagePlan plan, read_plan(data, size, o));
  CropWindow window{0, 0, plan.source.width, plan.source.height};
  if (o.mode == ImageResizeMode::random_resized_crop)
    window = random_resized_crop_window(plan.source.width, plan.source.height, o.crop_scale[0], o.crop_scale[1],
                                        o.crop_ratio[0], o.crop_ratio[1], *rng);
  return run_planned(data, size, o, std::move(plan), window, plan_out);
}

Expected<Image> image_pipeline_pixels(const uint8_t* data, size_t size, const ImagePipelineOptions& o,
                                      const CropWindow& window, ImagePlan* plan_out) {
  VLM_ASSIGN_OR_RETURN(ImagePlan plan, read_plan(data, size, o));
  return run_planned(data, size, o, std::move(plan), window, plan_out);
}

Status image_pipeline_run(const uint8_t* data, size_t size, const ImagePipelineOptions& options, Philox* rng,
                          float* out, ImagePlan* plan) {
  VLM_CHECK(out != nullptr, "image_pipeline_run: out is null");
  VLM_ASSIGN_OR_RETURN(Image pixels, image_pipeline_pixels(data, size, options, rng, plan));
  to_chw_normalized(pixels, options.mean, options.std, out);
  return Status();
}

Expected<Tensor> image_pipeline_tensor(const uint8_t* data, size_t size, const ImagePipelineOptions& options,
                                       Philox* rng, ImagePlan* plan) {
  VLM_RETURN_IF_ERROR(options.validate());
  Tensor t = Tensor::empty({3, options.size, options.size}, DType::f32);
  VLM_RETURN_IF_ERROR(image_pipeline_run(data, size, options, rng, t.data<float>(), plan));
  return t;
}

Status image_pipeline_sample(const WebDatasetSample& sample, const ImagePipelineOptions& options, Philox* rng,
                             float* out, ImagePlan* plan) {
  for (const char* field : {"jpg", "jpeg", "png", "webp"}) {
    const auto* bytes = sample.get(field);
    if (!bytes) continue;
    Status s = image_pipeline_run(bytes->data(), bytes->size(), options, rng, out, plan);
    if (!s.ok()) return s.with_context(str(sample.shard, ": sample '", sample.key, "' field '", field, "'"));
    return s;
  }
  return not_found(str(sample.shard, ": sample '", sample.key, "' has no jpg/jpeg/png/webp field"));
}

}  // namespace vlm
