// Image transforms for the vision input: antialiased resize (Pillow-compatible), crops, padding, the geometry of
// the usual training transforms (torchvision's Resize + CenterCrop and RandomResizedCrop, img2dataset's "border"),
// and normalisation to a CHW float tensor.
//
// Resize follows Pillow's Image.resize(size, BILINEAR | BICUBIC | LANCZOS, box) (reducing_gap=None): separable, horizontal
// pass first, the filter's support widened by the downscale factor (antialiasing), 8-bit fixed-point weights, 8-bit
// intermediate. The arithmetic is Pillow's integer arithmetic, so outputs equal Pillow 9.x's (tests require <= 2).
// On x86-64 CPUs with AVX2 both passes run in vector code that computes exactly the same integers as the plain
// loops (tests compare the two).
// Size arguments are checked with VLM_CHECK: validate user-provided sizes before calling. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/philox.h"
#include "data/image/image.h"

namespace vlm {

enum class ResizeFilter { bilinear, bicubic, lanczos };

Image resize_to(const Image& src, int width, int height, ResizeFilter filter = ResizeFilter::bicubic);

// The window [x0, x0 + crop_width) x [y0, y0 + crop_height) of resize_to(src, resize_width, resize_height):
// identical pixels, but only the window is computed.
Image resize_crop(const Image& src, int resize_width, int resize_height, int x0, int y0, int crop_width,
                  int crop_height, ResizeFilter filter = ResizeFilter::bicubic);

// torchvision's Resize(shorter) + CenterCrop((crop_height, crop_width)): the shorter side becomes `shorter`, the
// longer int(shorter * long / short); the crop is centred (offsets rounded half to even, as Python's round()).
// Needs crop_width/crop_height <= the resized size.
Image resize_shorter_then_center_crop(const Image& src, int shorter, int crop_width, int crop_height,
                                      ResizeFilter filter = ResizeFilter::bicubic);
// Square: shorter side to `size`, then the central size x size.
inline Image resize_shorter_then_center_crop(const Image& src, int size, ResizeFilter filter = ResizeFilter::bicubic) {
  return resize_shorter_then_center_crop(src, size, size, size, filter);
}

Image crop(const Image& src, int x0, int y0, int width, int height);

// Rows of 8-bit RGB pixels inside some buffer: a whole Image or a window of one, without copying. A resize sees
// the view as its whole source (the filter's taps stop at the view's edges, as after a crop).
struct ImageView {
  const uint8_t* data = nullptr;  // pixel (0, 0)
  int width = 0, height = 0;
  size_t stride = 0;              // bytes from one row to the next
  const uint8_t* end = nullptr;   // one past the last byte of the underlying buffer that may be read
};
ImageView image_view(const Image& image);
// The window [x0, x0 + width) x [y0, y0 + height) of `image` (must lie inside it).
ImageView image_view(const Image& image, int x0, int y0, int width, int height);

// A source rectangle [x0, x1) x [y0, y1) in pixels; fractional edges are allowed (float, as Pillow's box).
struct ResizeBox {
  float x0 = 0.f, y0 = 0.f, x1 = 0.f, y1 = 0.f;
};

// Pillow's Image.resize((width, height), filter, box=box): the box of `src` resized to width x height.
// Needs 0 <= x0 < x1 <= src.width (same for y).
Image resize_box(const ImageView& src, const ResizeBox& box, int width, int height,
                 ResizeFilter filter = ResizeFilter::bicubic);

// The general resize the functions above go through: `box` of `src` resized to resize_width x resize_height, of
// which only the window [x0, x0 + crop_width) x [y0, y0 + crop_height) is computed, written as 8-bit RGB rows to
// `dst` (row i at dst + i * dst_stride bytes; dst_stride >= 3 * crop_width).
void resize_into(const ImageView& src, const ResizeBox& box, int resize_width, int resize_height, int x0, int y0,
                 int crop_width, int crop_height, ResizeFilter filter, uint8_t* dst, size_t dst_stride);

// torchvision Resize(shorter) + CenterCrop geometry for a src_width x src_height image: the resized size and the
// crop offsets (see resize_shorter_then_center_crop).
struct CenterCropGeometry {
  int resize_width = 0, resize_height = 0, x0 = 0, y0 = 0;
};
CenterCropGeometry center_crop_geometry(int src_width, int src_height, int shorter, int crop_width, int crop_height);

// img2dataset's "border" mode (albumentations LongestMaxSize + PadIfNeeded): the longer side becomes `size`, the
// other round(side * size / longer) (halves to even, as Python's round()), at least 1; the result is centred on a
// size x size canvas, left = (size - width) / 2 and top = (size - height) / 2 rounded down.
struct BorderGeometry {
  int resize_width = 0, resize_height = 0, left = 0, top = 0;
};
BorderGeometry border_geometry(int src_width, int src_height, int size);
Image resize_longer_then_pad(const Image& src, int size, const uint8_t pad_rgb[3],
                             ResizeFilter filter = ResizeFilter::bicubic);

// torchvision RandomResizedCrop.get_params: up to 10 tries of area fraction ~ U(scale_lo, scale_hi) and
// log(aspect) ~ U(log ratio_lo, log ratio_hi); w = round(sqrt(area * aspect)), h = round(sqrt(area / aspect));
// the first (w, h) that fits gets a uniform position; otherwise the central crop clamped to the ratio range.
// All draws come from `rng`, so a (seed, subsequence) stream gives the same window every time. (CropWindow: image.h.)
CropWindow random_resized_crop_window(int src_width, int src_height, float scale_lo, float scale_hi, float ratio_lo,
                                      float ratio_hi, Philox& rng);

// out[c][y][x] = (rgb / 255 - mean[c]) / std[c]; `out` holds 3 * height * width floats ([3, H, W]).
void to_chw_normalized(const Image& image, const float mean[3], const float std[3], float* out);

namespace detail {
// Tests only: false forces the plain loops even where the AVX2 kernels could run. Returns the previous setting.
bool resize_set_simd(bool enabled);
bool resize_simd_available();  // the CPU has AVX2 and this build has the kernels
}  // namespace detail

}  // namespace vlm
