// The Idefics3 image processor's pixel path: Pillow-exact resizes on 8-bit RGB (data/image/transforms), crops, then
// transformers' rescale (x * factor in float64, stored as float32) and normalize ((x - mean) / std in float32).
#include "data/loader/idefics3_pixels.h"

#include "data/image/transforms.h"

namespace vlm {
namespace {

ResizeFilter filter_of(int pil_resample) {
  switch (pil_resample) {
    case 2: return ResizeFilter::bilinear;
    case 3: return ResizeFilter::bicubic;
    default: return ResizeFilter::lanczos;
  }
}

// PIL's resize returns a copy when the size is unchanged.
Image resized(const Image& img, int width, int height, ResizeFilter f) {
  if (img.width == width && img.height == height) return img;
  return resize_to(img, width, height, f);
}

void write_frame(const Image& frame, const Idefics3Options& o, float* out) {
  const int64_t plane = static_cast<int64_t>(frame.width) * frame.height;
  for (int64_t i = 0; i < plane; ++i)
    for (int ch = 0; ch < 3; ++ch) {
      const uint8_t v = frame.rgb[static_cast<size_t>(i * 3 + ch)];
      float x = o.do_rescale ? static_cast<float>(static_cast<double>(v) * o.rescale_factor) : static_cast<float>(v);
      if (o.do_normalize) x = (x - o.image_mean[ch]) / o.image_std[ch];
      out[ch * plane + i] = x;
    }
}

}  // namespace

Idefics3Pixels idefics3_pixel_values(const Image& image, const Idefics3Options& o) {
  VLM_CHECK(image.width > 0 && image.height > 0, "idefics3_pixel_values: empty image");
  Idefics3Pixels p;
  p.layout = idefics3_layout(image.height, image.width, o);
  const Idefics3Layout& l = p.layout;
  const ResizeFilter f = filter_of(o.resample);
  const int m = o.max_image_size;
  Image cur = resized(image, l.resized_width, l.resized_height, f);
  std::vector<Image> frames;
  if (o.do_image_splitting) {
    cur = resized(cur, l.split_width, l.split_height, f);
    for (const Idefics3Rect& t : l.tiles) frames.push_back(crop(cur, t.x, t.y, t.width, t.height));
  }
  frames.push_back(resized(cur, m, m, f));
  p.frames = Tensor::empty({static_cast<int64_t>(frames.size()), 3, m, m}, DType::f32);
  const int64_t per_frame = int64_t{3} * m * m;
  for (size_t i = 0; i < frames.size(); ++i) {
    VLM_CHECK(frames[i].width == m && frames[i].height == m, "idefics3_pixel_values: frame ", i, " is ",
              frames[i].width, "x", frames[i].height, ", expected ", m, "x", m);
    write_frame(frames[i], o, p.frames.data<float>() + static_cast<int64_t>(i) * per_frame);
  }
  return p;
}

}  // namespace vlm
