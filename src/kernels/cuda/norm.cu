// LayerNorm and RMSNorm on CUDA, optionally fused with the residual add (h = x + residual, then normalize h), with
// fp32 statistics (two-pass mean/variance over the row, like cpu/norm.cpp). Two paths, chosen per call:
//   * row-in-registers (cols a multiple of the 16-byte vector width, at most kMaxRowVecs vectors per lane, every
//     pointer 16-byte aligned; the training shapes, C = 576 and 768): one warp per row with 16-byte accesses. The
//     forward reads x (and residual) once and keeps h in registers for the statistics and the output. The backward
//     reads dy, x (and dh_next) once per row, writes dx, and sums its rows' weight/bias gradient terms in registers:
//     each block writes one [cols] partial per output, summed in a fixed order over its warps, then over blocks
//     (column_finish of column_reduce.cuh). No float atomics: the order depends on (rows, cols) alone.
//   * scalar fallback (any other width or alignment): one block per row, and the weight/bias gradients through the
//     generic two-pass column reduction.
#include <type_traits>

#include "kernels/cuda/column_reduce.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace vlm::ops::cuda {

namespace {

// ---- scalar fallback: one block per row ------------------------------------------------------------------------

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
  pdl::grid_begin();
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
  pdl::grid_begin();
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

// ---- row in registers: one warp per row, 16-byte vectors ---------------------------------------------------------

constexpr int kMaxRowVecs = 8;  // vectors per lane at most: rows up to 2048 bf16 / 1024 f32 values
constexpr int kFwdWarps = 4;    // rows per forward block (one warp each)
constexpr int kBwdWarps = 8;    // warps per backward block; they share the block's gradient partials
// Backward blocks at most: bounds the partials (blocks x cols f32 per output, ~2-5% of the row traffic at the model's
// shapes) while still giving ~2 blocks of 8 warps per SM. A constant, so the summation order never depends on the GPU.
constexpr int kBwdMaxBlocks = 256;

// Calls f(std::integral_constant<int, K>{}) with the smallest supported K >= the vectors per lane of a row of
// `vecs` vectors (K in {1, 2, 3, 4, 6, 8}; C = 768 is exactly 3 per lane in bf16, 6 in f32); false when the row is
// wider.
template <class F>
bool dispatch_row_vecs(int64_t vecs, F&& f) {
  const int64_t per_lane = ceil_div(vecs, 32);
  if (per_lane <= 1) f(std::integral_constant<int, 1>{});
  else if (per_lane <= 2) f(std::integral_constant<int, 2>{});
  else if (per_lane <= 3) f(std::integral_constant<int, 3>{});
  else if (per_lane <= 4) f(std::integral_constant<int, 4>{});
  else if (per_lane <= 6) f(std::integral_constant<int, 6>{});
  else if (per_lane <= kMaxRowVecs) f(std::integral_constant<int, kMaxRowVecs>{});
  else return false;
  return true;
}

// The forward of one row per warp: lane l owns the vectors l, l + 32, ..., l + 32 (kVecs - 1) of the row (those
// below cols / kVec16<T>). Same results as norm_forward_kernel up to the order of the fp32 sums: h is rounded to T
// before the statistics, exactly as the fallback reads it back. h may alias x or residual (each lane reads its own
// vectors before it writes them).
template <class T, int kVecs, bool kLayerNorm, bool kResidual>
__global__ void __launch_bounds__(kFwdWarps * 32)
    norm_forward_warp_kernel(T* h, T* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd, const T* x,
                             const T* residual, const T* __restrict__ w, const T* __restrict__ b, int64_t rows,
                             int64_t cols, float eps) {
  pdl::grid_begin();
  constexpr int kV = kVec16<T>;
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kFwdWarps + (threadIdx.x >> 5);
  if (row >= rows) return;  // the whole warp: no block barrier below
  const int vecs = static_cast<int>(cols / kV);
  const int64_t base = row * cols;
  // Every load of the row first (one memory round trip), then h.
  uint4 rx[kVecs], rr[kVecs];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = lane + 32 * k;
    if (i < vecs) {
      rx[k] = load_raw16(x + base + i * kV);
      if (kResidual) rr[k] = load_raw16(residual + base + i * kV);
    }
  }
  float v[kVecs][kV];
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = lane + 32 * k;
#pragma unroll
    for (int j = 0; j < kV; ++j) v[k][j] = 0.f;
    if (i >= vecs) continue;
    unpack_vec16<T>(rx[k], v[k]);
    if (kResidual) {
      float r[kV];
      unpack_vec16<T>(rr[k], r);
#pragma unroll
      for (int j = 0; j < kV; ++j) v[k][j] = round_to<T>(v[k][j] + r[j]);
      store_vec16(h + base + i * kV, v[k]);
    }
#pragma unroll
    for (int j = 0; j < kV; ++j) sum += v[k][j];
  }
  const float inv_cols = 1.f / static_cast<float>(cols);
  const float mu = kLayerNorm ? warp_sum(sum) * inv_cols : 0.f;
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    if (lane + 32 * k >= vecs) continue;
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const float d = v[k][j] - mu;
      ss += d * d;
    }
  }
  const float rs = 1.f / sqrtf(warp_sum(ss) * inv_cols + eps);
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int i = lane + 32 * k;
    if (i >= vecs) continue;
    float wv[kV], out[kV];
    load_vec16(w + i * kV, wv);
#pragma unroll
    for (int j = 0; j < kV; ++j) out[j] = (v[k][j] - mu) * rs * wv[j];
    if (b != nullptr) {
      float bv[kV];
      load_vec16(b + i * kV, bv);
#pragma unroll
      for (int j = 0; j < kV; ++j) out[j] += bv[j];
    }
    store_vec16(y + base + i * kV, out);
  }
  if (lane == 0) {
    if (mean != nullptr) mean[row] = mu;
    if (rstd != nullptr) rstd[row] = rs;
  }
}

// The backward, one row per warp (lanes own vectors as in the forward). Block b owns rows [b * row_chunk,
// min(rows, (b + 1) * row_chunk)); warp q of it takes the rows q, q + kBwdWarps, ... of that range in order. Per
// row: dx as norm_backward_dx_kernel (dx null: not needed; with kResidual, + dres, and dx may alias dres). With
// `partial` non-null, each lane also sums dy * xhat (and, for LayerNorm, dy) over its warp's rows for its columns;
// the block then adds its warps' sums in warp order into partial[(n * gridDim.x + b) * cols + c] (n = 0: the weight
// term, n = 1: the bias term).
// Registers: the row's dy, x (and dres) stay packed; bf16 rows of up to 3 vectors per lane (C <= 768) fit two
// blocks per SM without spilling, wider rows and f32 (twice the registers) take one.
template <class T, int kVecs, bool kLayerNorm, bool kResidual>
__global__ void __launch_bounds__(kBwdWarps * 32, sizeof(T) == 2 && kVecs <= 3 ? 2 : 1)
    norm_backward_warp_kernel(T* dx, float* __restrict__ partial, const T* dy, const T* dres, const T* x,
                              const T* __restrict__ w, const float* __restrict__ mean,
                              const float* __restrict__ rstd, int64_t rows, int64_t cols, int64_t row_chunk) {
  pdl::grid_begin();
  constexpr int kV = kVec16<T>;
  constexpr int kN = kLayerNorm ? 2 : 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int vecs = static_cast<int>(cols / kV);
  const float inv_cols = 1.f / static_cast<float>(cols);
  uint4 rw[kVecs];
#pragma unroll
  for (int k = 0; k < kVecs; ++k)
    if (lane + 32 * k < vecs) rw[k] = load_raw16(w + (lane + 32 * k) * kV);
  float acc[kN][kVecs][kV];
#pragma unroll
  for (int n = 0; n < kN; ++n)
#pragma unroll
    for (int k = 0; k < kVecs; ++k)
#pragma unroll
      for (int j = 0; j < kV; ++j) acc[n][k][j] = 0.f;

  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * row_chunk, r1 = min(rows, r0 + row_chunk);
  for (int64_t r = r0 + warp; r < r1; r += kBwdWarps) {
    const int64_t base = r * cols;
    uint4 rdy[kVecs], rx[kVecs], rres[kVecs];
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const int i = lane + 32 * k;
      if (i < vecs) {
        rdy[k] = load_raw16(dy + base + i * kV);
        rx[k] = load_raw16(x + base + i * kV);
        if (kResidual && dx != nullptr) rres[k] = load_raw16(dres + base + i * kV);
      }
    }
    const float mu = kLayerNorm ? mean[r] : 0.f, rs = rstd[r];
    float g_sum = 0.f, gx_sum = 0.f;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (lane + 32 * k >= vecs) continue;
      float d[kV], xv[kV], wv[kV];
      unpack_vec16<T>(rdy[k], d);
      unpack_vec16<T>(rx[k], xv);
      unpack_vec16<T>(rw[k], wv);
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        const float g = d[j] * wv[j], xhat = (xv[j] - mu) * rs;
        if constexpr (kLayerNorm) {
          g_sum += g;
          gx_sum += g * xhat;
          acc[1][k][j] += d[j];
        } else {
          gx_sum += g * xv[j];
        }
        acc[0][k][j] += d[j] * xhat;
      }
    }
    if (dx == nullptr) continue;  // the same for every warp
    const float g_mean = kLayerNorm ? warp_sum(g_sum) * inv_cols : 0.f;
    const float gx_mean = warp_sum(gx_sum) * inv_cols;
    const float kx = rs * rs * gx_mean;  // RMSNorm's coefficient of x
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const int i = lane + 32 * k;
      if (i >= vecs) continue;
      float d[kV], xv[kV], wv[kV], out[kV];
      unpack_vec16<T>(rdy[k], d);
      unpack_vec16<T>(rx[k], xv);
      unpack_vec16<T>(rw[k], wv);
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        const float g = d[j] * wv[j];
        out[j] = kLayerNorm ? rs * (g - g_mean - ((xv[j] - mu) * rs) * gx_mean) : rs * (g - xv[j] * kx);
      }
      if (kResidual) {
        float dr[kV];
        unpack_vec16<T>(rres[k], dr);
#pragma unroll
        for (int j = 0; j < kV; ++j) out[j] += dr[j];
      }
      store_vec16(dx + base + i * kV, out);
    }
  }
  if (partial == nullptr) return;  // the same for the whole block

  // The block's partials, one vector slot of the lanes at a time: column k * 32 * kV + t is slot t of round k.
  __shared__ float slots[kBwdWarps][32 * kV];
#pragma unroll
  for (int n = 0; n < kN; ++n)
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
#pragma unroll
      for (int j = 0; j < kV; ++j) slots[warp][lane * kV + j] = acc[n][k][j];
      __syncthreads();
      for (int t = threadIdx.x; t < 32 * kV; t += blockDim.x) {
        const int64_t c = static_cast<int64_t>(k) * 32 * kV + t;
        if (c >= cols) continue;
        float s = 0.f;
#pragma unroll
        for (int q = 0; q < kBwdWarps; ++q) s += slots[q][t];
        partial[(n * static_cast<int64_t>(gridDim.x) + blockIdx.x) * cols + c] = s;
      }
      __syncthreads();  // the slots are rewritten next round
    }
}

// ---- launch: the row-in-registers path where it applies, else the fallback --------------------------------------

template <class T, bool kLayerNorm>
void launch_forward(Tensor& h, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& residual,
                    const Tensor& w, const Tensor& b, float eps) {
  const int64_t cols = x.dim(-1), rows = cols > 0 ? x.numel() / cols : 0;
  if (rows == 0) return;
  cudaStream_t stream = stream_of(y.device());
  T* const h_p = ptr_or_null<T>(h);
  const T* const res_p = ptr_or_null<T>(residual);
  const bool has_res = residual.defined();
  const bool vec = cols % kVec16<T> == 0 &&
                   all_aligned16(h_p, ptr<T>(y), ptr<T>(x), res_p, ptr<T>(w), ptr_or_null<T>(b)) &&
                   dispatch_row_vecs(cols / kVec16<T>, [&](auto vecs) {
                     constexpr int K = decltype(vecs)::value;
                     const auto grid = static_cast<unsigned>(ceil_div(rows, kFwdWarps));
                     if (has_res) {
                       pdl::launch(norm_forward_warp_kernel<T, K, kLayerNorm, true>, grid, kFwdWarps * 32, 0, stream,
                                   h_p, ptr<T>(y), ptr_or_null<float>(mean), ptr_or_null<float>(rstd), ptr<T>(x), res_p,
                                   ptr<T>(w), ptr_or_null<T>(b), rows, cols, eps);
                     } else {
                       pdl::launch(norm_forward_warp_kernel<T, K, kLayerNorm, false>, grid, kFwdWarps * 32, 0, stream,
                                   nullptr, ptr<T>(y), ptr_or_null<float>(mean), ptr_or_null<float>(rstd), ptr<T>(x),
                                   nullptr, ptr<T>(w), ptr_or_null<T>(b), rows, cols, eps);
                     }
                   });
  if (!vec) {
    const int threads = row_threads(cols);
    const auto rows_grid = static_cast<unsigned>(rows);
    if (has_res) {
      pdl::launch(norm_forward_kernel<T, kLayerNorm, true>, rows_grid, threads, 0, stream, h_p, ptr<T>(y),
                  ptr_or_null<float>(mean), ptr_or_null<float>(rstd), ptr<T>(x), res_p, ptr<T>(w), ptr_or_null<T>(b),
                  cols, eps);
    } else {
      pdl::launch(norm_forward_kernel<T, kLayerNorm, false>, rows_grid, threads, 0, stream, nullptr, ptr<T>(y),
                  ptr_or_null<float>(mean), ptr_or_null<float>(rstd), ptr<T>(x), nullptr, ptr<T>(w), ptr_or_null<T>(b),
                  cols, eps);
    }
  }
  VLM_CUDA_CHECK_LAUNCH();
}

// The row-in-registers backward (false when the shape or alignment does not allow it): one kernel for dx and the
// per-block partials, then the fixed-order sum over blocks into dw (and db).
template <class T, bool kLayerNorm>
bool launch_backward_rows(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& dres, const Tensor& x,
                          const Tensor& w, const float* mean_p, const float* rstd_p, int64_t rows, int64_t cols) {
  constexpr int kN = kLayerNorm ? 2 : 1;
  T* const dx_p = ptr_or_null<T>(dx);
  const T* const dres_p = ptr_or_null<T>(dres);
  if (cols % kVec16<T> != 0 || ceil_div(cols / kVec16<T>, 32) > kMaxRowVecs ||
      !all_aligned16(dx_p, ptr<T>(dy), dres_p, ptr<T>(x), ptr<T>(w)))
    return false;
  const Device dev = dy.device();
  cudaStream_t stream = stream_of(dev);
  ColumnOutputs<kN> outs{};
  outs.out[0] = ptr_or_null<float>(dw);
  if (kLayerNorm) outs.out[kN - 1] = ptr_or_null<float>(db);
  bool params = false;
  for (float* o : outs.out) params = params || o != nullptr;
  const int64_t row_chunk = std::max<int64_t>(kBwdWarps, ceil_div(rows, kBwdMaxBlocks));
  const int64_t blocks = ceil_div(rows, row_chunk);
  Tensor partial = params ? scratch(Shape{kN * blocks * cols}, DType::f32, dev) : Tensor();
  float* const partial_p = ptr_or_null<float>(partial);
  const bool launched = dispatch_row_vecs(cols / kVec16<T>, [&](auto vecs) {
    constexpr int K = decltype(vecs)::value;
    const auto grid = static_cast<unsigned>(blocks);
    if (dres_p != nullptr) {
      pdl::launch(norm_backward_warp_kernel<T, K, kLayerNorm, true>, grid, kBwdWarps * 32, 0, stream, dx_p, partial_p,
                  ptr<T>(dy), dres_p, ptr<T>(x), ptr<T>(w), mean_p, rstd_p, rows, cols, row_chunk);
    } else {
      pdl::launch(norm_backward_warp_kernel<T, K, kLayerNorm, false>, grid, kBwdWarps * 32, 0, stream, dx_p, partial_p,
                  ptr<T>(dy), nullptr, ptr<T>(x), ptr<T>(w), mean_p, rstd_p, rows, cols, row_chunk);
    }
  });
  VLM_CHECK(launched, "norm backward: row width ", cols, " passed the check above but has no kernel");
  VLM_CUDA_CHECK_LAUNCH();
  if (params) column_finish<kN>(outs, partial_p, blocks, cols, stream);
  return true;
}

template <class T, bool kLayerNorm>
void launch_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& dres, const Tensor& x,
                     const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  const int64_t cols = x.dim(-1), rows = cols > 0 ? x.numel() / cols : 0;
  if (rows == 0) return;
  const Device dev = dy.device();
  cudaStream_t stream = stream_of(dev);
  const float* mean_p = kLayerNorm ? ptr<float>(mean) : nullptr;
  if (!dx.defined() && !dw.defined() && !db.defined()) return;
  if (launch_backward_rows<T, kLayerNorm>(dx, dw, db, dy, dres, x, w, mean_p, ptr<float>(rstd), rows, cols)) return;
  if (dx.defined()) {
    const int threads = row_threads(cols);
    const auto rows_grid = static_cast<unsigned>(rows);
    if (dres.defined()) {
      pdl::launch(norm_backward_dx_kernel<T, kLayerNorm, true>, rows_grid, threads, 0, stream, ptr<T>(dx), ptr<T>(dy),
                  ptr<T>(dres), ptr<T>(x), ptr<T>(w), mean_p, ptr<float>(rstd), cols);
    } else {
      pdl::launch(norm_backward_dx_kernel<T, kLayerNorm, false>, rows_grid, threads, 0, stream, ptr<T>(dx), ptr<T>(dy),
                  nullptr, ptr<T>(x), ptr<T>(w), mean_p, ptr<float>(rstd), cols);
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
