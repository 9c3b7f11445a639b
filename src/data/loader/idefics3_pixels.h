// Idefics3 / SmolVLM pixel values, as transformers' Idefics3ImageProcessor computes them on the PIL path: the image
// resized (Pillow's resample, LANCZOS by default) so its longest edge is size.longest_edge; with image splitting,
// resized again to tile multiples and cut into rows x cols tiles of max_image_size squared (row-major), then the
// global image (that picture resized to max_image_size squared); without splitting only the image resized to
// max_image_size squared. Each frame is rescaled and normalized per channel in float32 as numpy does it.
#pragma once

#include "core/tensor.h"
#include "data/image/image.h"
#include "data/loader/idefics3_layout.h"

namespace vlm {

struct Idefics3Pixels {
  Tensor frames;  // f32 [rows * cols + 1, 3, S, S], S = max_image_size: the tiles, then the global image
  Idefics3Layout layout;
};

// `image` RGB, both sides > 0.
Idefics3Pixels idefics3_pixel_values(const Image& image, const Idefics3Options& o);

}  // namespace vlm
