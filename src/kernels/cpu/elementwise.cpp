// Elementwise ops and the row-broadcast add (learned position embeddings), each element written by one thread.
#include <algorithm>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"

namespace vlm::ops::cpu {

namespace {
constexpr int64_t kColumnBlock = 256;  // columns per task in add_rows_broadcast_backward
}  // namespace

void fill(float* x, int64_t n, float value) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

void scale(float* x, int64_t n, float s) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void add(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_inplace(float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

void add_rows_broadcast(float* x, const float* pos, int64_t blocks, int64_t rows, int64_t cols) {
  const int64_t total_rows = blocks * rows;
#pragma omp parallel for schedule(static) if (total_rows * cols >= kParallelMinWork)
  for (int64_t r = 0; r < total_rows; ++r) {
    float* xr = x + r * cols;
    const float* pr = pos + (r % rows) * cols;
    for (int64_t c = 0; c < cols; ++c) xr[c] += pr[c];
  }
}

void add_rows_broadcast_backward(float* dpos, const float* dx, int64_t blocks, int64_t rows, int64_t cols) {
  // Each task owns a tile of dpos (one row, a block of columns) and sums the B blocks into it in order.
  const int64_t col_blocks = (cols + kColumnBlock - 1) / kColumnBlock;
  const int64_t tasks = rows * col_blocks;
#pragma omp parallel for schedule(static) if (blocks * rows * cols >= kParallelMinWork)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t r = task / col_blocks, c0 = (task % col_blocks) * kColumnBlock;
    const int64_t width = std::min(kColumnBlock, cols - c0);
    float acc[kColumnBlock] = {};
    for (int64_t b = 0; b < blocks; ++b) {
      const float* src = dx + (b * rows + r) * cols + c0;
      for (int64_t c = 0; c < width; ++c) acc[c] += src[c];
    }
    float* dst = dpos + r * cols + c0;
    for (int64_t c = 0; c < width; ++c) dst[c] += acc[c];
  }
}

}  // namespace vlm::ops::cpu
