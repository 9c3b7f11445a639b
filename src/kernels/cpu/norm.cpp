// LayerNorm and RMSNorm over the last dim. Rows are independent: the forward and dx are parallel over rows; the
// weight/bias gradients are parallel over column blocks, each summing its columns over the rows in order.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"

namespace vlm::ops::cpu {

namespace {

constexpr int64_t kColumnBlock = 256;

// For every column block, acc_w[c] = sum_t dy[t, c] * xhat(t, c) and acc_b[c] = sum_t dy[t, c] (rows in order),
// then dw[c] += acc_w[c], db[c] += acc_b[c]. xhat(t, c) = (x[t, c] - shift[t]) * rstd[t]; shift may be null (0).
void norm_param_grads(float* dw, float* db, const float* dy, const float* x, const float* shift, const float* rstd,
                      int64_t rows, int64_t cols) {
  const int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMinWork)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kColumnBlock, width = std::min(kColumnBlock, cols - c0);
    float acc_w[kColumnBlock] = {}, acc_b[kColumnBlock] = {};
    for (int64_t t = 0; t < rows; ++t) {
      const float* xt = x + t * cols + c0;
      const float* dyt = dy + t * cols + c0;
      const float mu = shift != nullptr ? shift[t] : 0.f, rs = rstd[t];
      for (int64_t c = 0; c < width; ++c) {
        acc_w[c] += dyt[c] * ((xt[c] - mu) * rs);
        acc_b[c] += dyt[c];
      }
    }
    if (dw != nullptr)
      for (int64_t c = 0; c < width; ++c) dw[c0 + c] += acc_w[c];
    if (db != nullptr)
      for (int64_t c = 0; c < width; ++c) db[c0 + c] += acc_b[c];
  }
}

}  // namespace

void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w, const float* bias,
                       int64_t rows, int64_t cols, float eps) {
  const float inv_cols = 1.f / static_cast<float>(cols);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMinWork)
  for (int64_t t = 0; t < rows; ++t) {
    const float* xt = x + t * cols;
    float* yt = y + t * cols;
    const float mu = reduce8(cols, [&](int64_t i) { return xt[i]; }) * inv_cols;
    const float var = reduce8(cols,
                              [&](int64_t i) {
                                const float d = xt[i] - mu;
                                return d * d;
                              }) *
                      inv_cols;
    const float rs = 1.f / std::sqrt(var + eps);
    if (bias != nullptr) {
      for (int64_t i = 0; i < cols; ++i) yt[i] = (xt[i] - mu) * rs * w[i] + bias[i];
    } else {
      for (int64_t i = 0; i < cols; ++i) yt[i] = (xt[i] - mu) * rs * w[i];
    }
    if (mean != nullptr) mean[t] = mu;
    if (rstd != nullptr) rstd[t] = rs;
  }
}

void layernorm_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                        const float* mean, const float* rstd, int64_t rows, int64_t cols) {
  const float inv_cols = 1.f / static_cast<float>(cols);
  if (dx != nullptr) {
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * w.
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMinWork)
    for (int64_t t = 0; t < rows; ++t) {
      const float* xt = x + t * cols;
      const float* dyt = dy + t * cols;
      float* dxt = dx + t * cols;
      const float mu = mean[t], rs = rstd[t];
      const float g_mean = reduce8(cols, [&](int64_t i) { return dyt[i] * w[i]; }) * inv_cols;
      const float gx_mean = reduce8(cols, [&](int64_t i) { return dyt[i] * w[i] * ((xt[i] - mu) * rs); }) * inv_cols;
      for (int64_t i = 0; i < cols; ++i) {
        const float xhat = (xt[i] - mu) * rs;
        dxt[i] = rs * (dyt[i] * w[i] - g_mean - xhat * gx_mean);
      }
    }
  }
  if (dw != nullptr || db != nullptr) norm_param_grads(dw, db, dy, x, mean, rstd, rows, cols);
}

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t rows, int64_t cols, float eps) {
  const float inv_cols = 1.f / static_cast<float>(cols);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMinWork)
  for (int64_t t = 0; t < rows; ++t) {
    const float* xt = x + t * cols;
    float* yt = y + t * cols;
    const float ms = reduce8(cols, [&](int64_t i) { return xt[i] * xt[i]; }) * inv_cols;
    const float rs = 1.f / std::sqrt(ms + eps);
    for (int64_t i = 0; i < cols; ++i) yt[i] = xt[i] * rs * w[i];
    if (rstd != nullptr) rstd[t] = rs;
  }
}

void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd,
                      int64_t rows, int64_t cols) {
  const float inv_cols = 1.f / static_cast<float>(cols);
  if (dx != nullptr) {
    // dx = rstd * (g - x * rstd^2 * mean(g * x)),  g = dy * w.
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMinWork)
    for (int64_t t = 0; t < rows; ++t) {
      const float* xt = x + t * cols;
      const float* dyt = dy + t * cols;
      float* dxt = dx + t * cols;
      const float rs = rstd[t];
      const float gx_mean = reduce8(cols, [&](int64_t i) { return dyt[i] * w[i] * xt[i]; }) * inv_cols;
      const float k = rs * rs * gx_mean;
      for (int64_t i = 0; i < cols; ++i) dxt[i] = rs * (dyt[i] * w[i] - xt[i] * k);
    }
  }
  if (dw != nullptr) norm_param_grads(dw, nullptr, dy, x, nullptr, rstd, rows, cols);
}

}  // namespace vlm::ops::cpu
