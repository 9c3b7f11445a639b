// The optimizer family's CPU reference: the AdamW update and the global sum of squares (for gradient-norm clipping).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"

namespace vlm::ops::cpu {

namespace {
// sum_of_squares sums fixed chunks of this many elements (in double), then the chunk sums in order: the result
// depends on n alone, never on the thread count.
constexpr int64_t kSquareChunk = int64_t{1} << 14;
}  // namespace

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWScalars& s) {
  float grad_scale = s.grad_scale;  // as the CUDA kernel scales them
  if (s.grad_sum_of_squares != nullptr) grad_scale *= clip_factor(*s.grad_sum_of_squares, s.max_grad_norm);
#pragma omp parallel for schedule(static) if (n >= kParallelMinWork / 4)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale;
    const float mi = s.beta1 * m[i] + (1.f - s.beta1) * g;
    const float vi = s.beta2 * v[i] + (1.f - s.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / s.bias_correction1;
    const float v_hat = vi / s.bias_correction2;
    const float p = param[i];
    param[i] = p - s.lr * (m_hat / (std::sqrt(v_hat) + s.eps) + s.weight_decay * p);
  }
}

double sum_of_squares(const float* x, int64_t n) {
  const int64_t chunks = (n + kSquareChunk - 1) / kSquareChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static) if (n >= kParallelMinWork)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t begin = ch * kSquareChunk, end = std::min(n, begin + kSquareChunk);
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    int64_t i = begin;
    for (; i + 4 <= end; i += 4)
      for (int l = 0; l < 4; ++l) acc[l] += static_cast<double>(x[i + l]) * x[i + l];
    for (int l = 0; i < end; ++i, ++l) acc[l] += static_cast<double>(x[i]) * x[i];
    partial[static_cast<size_t>(ch)] = (acc[0] + acc[2]) + (acc[1] + acc[3]);
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace vlm::ops::cpu
