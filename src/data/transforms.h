// Image transforms for the vision input: antialiased resize (Pillow-compatible), crops, and normalisation to a
// CHW float tensor.
//
// Resize follows Pillow's Image.resize(size, BILINEAR | BICUBIC) (reducing_gap=None): separable, horizontal pass
// first, the filter's support widened by the downscale factor (antialiasing), 8-bit fixed-point weights, 8-bit
// intermediate. Outputs match Pillow 9.x to within 1 level (tests require <= 2).
// Size arguments are checked with VLM_CHECK: validate user-provided sizes before calling.
#pragma once

#include "data/image.h"

namespace vlm {

enum class ResizeFilter { bilinear, bicubic };

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

// out[c][y][x] = (rgb / 255 - mean[c]) / std[c]; `out` holds 3 * height * width floats ([3, H, W]).
void to_chw_normalized(const Image& image, const float mean[3], const float std[3], float* out);

}  // namespace vlm
