// LayerNorm and RMSNorm on CUDA, optionally fused with the residual add (h = x + residual, then normalize h):
// one block per row with fp32 statistics (two-pass mean/variance, like cpu/norm.cpp), dx per row in one kernel, and
// the weight/bias gradients through the deterministic two-pass column reduction (column_reduce.cuh).
#include "kernels/cuda/column_reduce.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace vlm::ops::cuda {

namespace {

// Threads per row: enough lanes for the row, at most 256 (rows are many; each block stays small).
int row_threads(int64_t cols) {
  if (cols <= 128) return 32;
  if (cols <= 512) return 64;
  if (cols <= 2048) return 128;
  return 256;
}

// y = (h - mean) * rstd * w (+ b), h = x (+ residual, stored to h first). RMSNorm: mean = 0 and "variance" is the
// mean of squares. mean/rstd/b/residual may be null.
template <class T, bool kLayerNorm, bool kResidual>
__global__ void norm_forward_kernel(T* h, T* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd,
                                    const T* x, const T* residual, const T* __restrict__ w, const T* __restrict__ b,
                                    int64_t cols, float eps) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float inv_cols = 1.f / static_cast<float>(cols);
  const T* src = x + row * cols;
  if (kResidual) {
    T* hr = h + row * cols;
    const T* rr = residual + row * cols;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) hr[i] = from_f32<T>(to_f32(src[i]) + to_f32(rr[i]));
    src = hr;  // each thread reads back only the elements it wrote: no block sync needed
  }
  float mu = 0.f;
  if (kLayerNorm) {
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) s += to_f32(src[i]);
    mu = block_sum(s, scratch) * inv_cols;
  }
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float d = to_f32(src[i]) - mu;
    ss += d * d;
  }
  const float var = block_sum(ss, scratch) * inv_cols;
  const float rs = 1.f / sqrtf(var + eps);
  T* yr = y + row * cols;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    float v = (to_f32(src[i]) - mu) * rs * to_f32(w[i]);
    if (b != nullptr) v += to_f32(b[i]);
    yr[i] = from_f32<T>(v);
  }
  if (threadIdx.x == 0) {
    if (mean != nullptr) mean[row] = mu;
    if (rstd != nullptr) rstd[row] = rs;
  }
}

// dx for one row (g = dy * w, xhat = (x - mean) * rstd):
//   LayerNorm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat));  RMSNorm: dx = rstd * (g - x * rstd^2 * mean(g x)).
// With kResidual, dx += dres (dx may alias dres).
template <class T, bool kLayerNorm, bool kResidual>
__global__ void norm_backward_dx_kernel(T* dx, const T* __restrict__ dy, const T* dres, const T* __restrict__ x,
                                        const T* __restrict__ w, const float* __restrict__ mean,
                                        const float* __restrict__ rstd, int64_t cols) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float inv_cols = 1.f / static_cast<float>(cols);
  const T* xr = x + row * cols;
  const T* dyr = dy + row * cols;
  const float mu = kLayerNorm ? mean[row] : 0.f, rs = rstd[row];
  float g_sum = 0.f, gx_sum = 0.f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float g = to_f32(dyr[i]) * to_f32(w[i]);
    if (kLayerNorm) {
      g_sum += g;
      gx_sum += g * ((to_f32(xr[i]) - mu) * rs);
    } else {
      gx_sum += g * to_f32(xr[i]);
    }
  }
  const float g_mean = kLayerNorm ? block_sum(g_sum, scratch) * inv_cols : 0.f;
  const float gx_mean = block_sum(gx_sum, scratch) * inv_cols;
  const float k = rs * rs * gx_mean;  // RMSNorm's coefficient of x
  T* dxr = dx + row * cols;
  const T* dresr = kResidual ? dres + row * cols : nullptr;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float xi = to_f32(xr[i]), g = to_f32(dyr[i]) * to_f32(w[i]);
    float d;
    if (kLayerNorm) {
      const float xhat = (xi - mu) * rs;
      d = rs * (g - g_mean - xhat * gx_mean);
    } else {
      d = rs * (g - xi * k);
    }
    if (kResidual) d += to_f32(dresr[i]);
    dxr[i] = from_f32<T>(d);
  }
}

// Per element: {dy * xhat, dy} (LayerNorm: dw, db) or {dy * x * rstd} (RMSNorm: dw).
template <class T, int N>
struct NormParamGrad {
  const T* dy;
  const T* x;
  const float* mean;  // null for RMSNorm
  const float* rstd;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[N]) const {
    const float d = to_f32(dy[r * cols + c]);
    const float mu = mean != nullptr ? mean[r] : 0.f;
    v[0] = d * ((to_f32(x[r * cols + c]) - mu) * rstd[r]);
    if (N > 1) v[N - 1] = d;
  }
};

template <class T, bool kLayerNorm>
void launch_forward(Tensor& h, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& residual,
                    const Tensor& w, const Tensor& b, float eps) {
  const int64_t cols = x.dim(-1), rows = cols > 0 ? x.numel() / cols : 0;
  if (rows == 0) return;
  const int threads = row_threads(cols);
  cudaStream_t stream = stream_of(y.device());
  const auto rows_grid = static_cast<unsigned>(rows);
  if (residual.defined()) {
    norm_forward_kernel<T, kLayerNorm, true><<<rows_grid, threads, 0, stream>>>(
        ptr<T>(h), ptr<T>(y), ptr_or_null<float>(mean), ptr_or_null<float>(rstd), ptr<T>(x), ptr<T>(residual),
        ptr<T>(w), ptr_or_null<T>(b), cols, eps);
  } else {
    norm_forward_kernel<T, kLayerNorm, false><<<rows_grid, threads, 0, stream>>>(
        nullptr, ptr<T>(y), ptr_or_null<float>(mean), ptr_or_null<float>(rstd), ptr<T>(x), nullptr, ptr<T>(w),
        ptr_or_null<T>(b), cols, eps);
  }
  VLM_CUDA_CHECK_LAUNCH();
}

template <class T, bool kLayerNorm>
void launch_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& dres, const Tensor& x,
                     const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  const int64_t cols = x.dim(-1), rows = cols > 0 ? x.numel() / cols : 0;
  if (rows == 0) return;
  const Device dev = dy.device();
  cudaStream_t stream = stream_of(dev);
  const float* mean_p = kLayerNorm ? ptr<float>(mean) : nullptr;
  if (dx.defined()) {
    const int threads = row_threads(cols);
    const auto rows_grid = static_cast<unsigned>(rows);
    if (dres.defined()) {
      norm_backward_dx_kernel<T, kLayerNorm, true><<<rows_grid, threads, 0, stream>>>(
          ptr<T>(dx), ptr<T>(dy), ptr<T>(dres), ptr<T>(x), ptr<T>(w), mean_p, ptr<float>(rstd), cols);
    } else {
      norm_backward_dx_kernel<T, kLayerNorm, false><<<rows_grid, threads, 0, stream>>>(
          ptr<T>(dx), ptr<T>(dy), nullptr, ptr<T>(x), ptr<T>(w), mean_p, ptr<float>(rstd), cols);
    }
    VLM_CUDA_CHECK_LAUNCH();
  }
  if (kLayerNorm) {
    column_reduce<2>(ColumnOutputs<2>{{ptr_or_null<float>(dw), ptr_or_null<float>(db)}}, rows, cols, dev,
                     NormParamGrad<T, 2>{ptr<T>(dy), ptr<T>(x), mean_p, ptr<float>(rstd), cols});
  } else {
    column_reduce<1>(ColumnOutputs<1>{{ptr_or_null<float>(dw)}}, rows, cols, dev,
                     NormParamGrad<T, 1>{ptr<T>(dy), ptr<T>(x), nullptr, ptr<float>(rstd), cols});
  }
}

}  // namespace

void layernorm_forward(Tensor& h, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& residual,
                       const Tensor& w, const Tensor& b, float eps) {
  DeviceGuard guard(y.device());
  dispatch_float(y.dtype(), "layernorm_forward", [&](auto tag) {
    launch_forward<decltype(tag), true>(h, y, mean, rstd, x, residual, w, b, eps);
  });
}

void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& dres, const Tensor& x,
                        const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  DeviceGuard guard(dy.device());
  dispatch_float(dy.dtype(), "layernorm_backward", [&](auto tag) {
    launch_backward<decltype(tag), true>(dx, dw, db, dy, dres, x, w, mean, rstd);
  });
}

void rmsnorm_forward(Tensor& h, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& residual, const Tensor& w,
                     float eps) {
  DeviceGuard guard(y.device());
  Tensor no_mean, no_bias;
  dispatch_float(y.dtype(), "rmsnorm_forward", [&](auto tag) {
    launch_forward<decltype(tag), false>(h, y, no_mean, rstd, x, residual, w, no_bias, eps);
  });
}

void rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& dres, const Tensor& x, const Tensor& w,
                      const Tensor& rstd) {
  DeviceGuard guard(dy.device());
  Tensor no_db, no_mean;
  dispatch_float(dy.dtype(), "rmsnorm_backward", [&](auto tag) {
    launch_backward<decltype(tag), false>(dx, dw, no_db, dy, dres, x, w, no_mean, rstd);
  });
}

}  // namespace vlm::ops::cuda
