// Data-movement ops of the vision path: patch extraction (conv-as-GEMM input) and nanoVLM's pixel shuffle.
// Both are bijections between input and output elements, so each backward overwrites every input gradient.
#include <cstring>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"

namespace vlm::ops::cpu {

namespace {

// Calls run(patch_offset, image_offset) for every run of `patch` contiguous pixels: the patch row
// r = (b * grid_h + py) * grid_w + px holds features (c, ky, kx) = images[b, c, py * p + ky, px * p + kx].
// One task per patch row, so each task touches its own patch row and its own image pixels.
template <class Run>
void for_each_patch_run(int64_t batch, int64_t channels, int64_t height, int64_t width, int64_t patch, Run run) {
  const int64_t grid_h = height / patch, grid_w = width / patch;
  const int64_t rows = batch * grid_h * grid_w, features = channels * patch * patch;
#pragma omp parallel for schedule(static) if (rows * features >= kParallelMinWork)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / (grid_h * grid_w), py = (r / grid_w) % grid_h, px = r % grid_w;
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t ky = 0; ky < patch; ++ky)
        run(r * features + (c * patch + ky) * patch,
            ((b * channels + c) * height + py * patch + ky) * width + px * patch);
  }
}

// Calls run(y_offset, x_offset) for every run of `cols` channels:
// y[b, ho * (S/r) + wo, (ry * r + rx) * C + c] = x[b, (ho * r + ry) * S + wo * r + rx, c]. One task per y row.
template <class Run>
void for_each_shuffle_run(int64_t batch, int64_t side, int64_t cols, int64_t factor, Run run) {
  const int64_t out_side = side / factor, out_rows = batch * out_side * out_side;
  const int64_t out_cols = cols * factor * factor;
#pragma omp parallel for schedule(static) if (out_rows * out_cols >= kParallelMinWork)
  for (int64_t r = 0; r < out_rows; ++r) {
    const int64_t b = r / (out_side * out_side), ho = (r / out_side) % out_side, wo = r % out_side;
    for (int64_t ry = 0; ry < factor; ++ry)
      for (int64_t rx = 0; rx < factor; ++rx)
        run(r * out_cols + (ry * factor + rx) * cols,
            (b * side * side + (ho * factor + ry) * side + wo * factor + rx) * cols);
  }
}

}  // namespace

void image_to_patches(float* patches, const float* images, int64_t batch, int64_t channels, int64_t height,
                      int64_t width, int64_t patch) {
  const size_t bytes = static_cast<size_t>(patch) * sizeof(float);
  for_each_patch_run(batch, channels, height, width, patch,
                     [&](int64_t po, int64_t io) { std::memcpy(patches + po, images + io, bytes); });
}

void image_to_patches_backward(float* dimages, const float* dpatches, int64_t batch, int64_t channels, int64_t height,
                               int64_t width, int64_t patch) {
  const size_t bytes = static_cast<size_t>(patch) * sizeof(float);
  for_each_patch_run(batch, channels, height, width, patch,
                     [&](int64_t po, int64_t io) { std::memcpy(dimages + io, dpatches + po, bytes); });
}

void pixel_shuffle_forward(float* y, const float* x, int64_t batch, int64_t side, int64_t cols, int64_t factor) {
  const size_t bytes = static_cast<size_t>(cols) * sizeof(float);
  for_each_shuffle_run(batch, side, cols, factor, [&](int64_t yo, int64_t xo) { std::memcpy(y + yo, x + xo, bytes); });
}

void pixel_shuffle_backward(float* dx, const float* dy, int64_t batch, int64_t side, int64_t cols, int64_t factor) {
  const size_t bytes = static_cast<size_t>(cols) * sizeof(float);
  for_each_shuffle_run(batch, side, cols, factor,
                       [&](int64_t yo, int64_t xo) { std::memcpy(dx + xo, dy + yo, bytes); });
}

}  // namespace vlm::ops::cpu
