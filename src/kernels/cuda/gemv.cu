// The small-batch linear layers on CUDA: a GEMV for at most kGemvMaxRows rows (a decode step at small batch), with
// the neighbours of a transformer block's projections fused in: the RMSNorm before it, the bias, the residual add
// after it, or the SwiGLU of a packed gate/up projection. At one to eight rows a product is a pass over the weights,
// and cuBLASLt's GEMMs plus the separate norm, split and add kernels around them cost more in launches and
// round trips than the pass itself; this kernel is that one pass.
//
// Layout: one block of kWarps warps stages the call's x rows (normalized when a norm weight is given, then rounded to
// the compute dtype exactly as rmsnorm_forward would store them) in shared memory; each warp then owns output columns
// n = warp id, + total warps, ...: its lanes stream the weight row(s) in 16-byte vectors, kUnroll loads in flight per
// lane, multiply them with every x row in fp32 and reduce across the warp in a fixed order (results are
// deterministic). The epilogue adds bias and residual in fp32 and rounds once; with SwiGLU a warp reads gate row n and
// up row n + I, rounds each product to the compute dtype (as the GEMM would store the packed projection) and writes
// silu(gate) * up. The grid is capped at a few blocks per SM so that a wide output (the LM head) reuses each staged x.
#include <algorithm>
#include <climits>
#include <cmath>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace vlm::ops::cuda {

namespace {

constexpr int kWarps = 4;                      // warps per block
constexpr int kBlocksPerSm = 4;                // grid cap: blocks per SM (each stages x once)
constexpr int64_t kMaxStagedBytes = 32 << 10;  // x rows in shared memory (under the 48 KiB needing no opt-in)

struct GemvParams {
  const void* x;         // [rows, in]
  const void* norm_w;    // [in] or null: no RMSNorm
  const void* w;         // [n (x 2 with SwiGLU), in]
  const void* bias;      // [n (x 2 with SwiGLU)] or null
  const void* residual;  // [rows, n] or null
  void* y;               // [rows, n], compute dtype or f32
  int rows, in, n;
  float eps;
};

// silu(g) * u, as swiglu_packed_forward computes it.
__device__ __forceinline__ float silu_times(float g, float u) {
  const float sig = 1.f / (1.f + expf(-g));
  return g * sig * u;
}

// The bytes of the block's first kWarps weight rows (fewer at the end of the matrix; no reads of memory).
template <class T>
__device__ __forceinline__ int64_t first_rows_bytes(const GemvParams& p) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kWarps;
  const int64_t rows = first < p.n ? min(static_cast<int64_t>(kWarps), p.n - first) : 0;
  return rows * p.in * static_cast<int64_t>(sizeof(T));
}

// acc[r] += w_vec . x_r[v * kV ...] for the call's rows (x staged in T, 16-byte aligned per vector).
template <class T, int kRows>
__device__ __forceinline__ void dot_rows(float (&acc)[kRows], const uint4& raw, const T* xs, int in, int v,
                                         int rows) {
  constexpr int kV = kVec16<T>;
  float wv[kV];
  unpack_vec16<T>(raw, wv);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r >= rows) break;
    float xv[kV];
    load_vec16(xs + static_cast<int64_t>(r) * in + v * kV, xv);
#pragma unroll
    for (int j = 0; j < kV; ++j) acc[r] = fmaf(wv[j], xv[j], acc[r]);
  }
}

// One warp's dot products of weight row `row` (and, with SwiGLU, row `row + n`) against the staged rows.
template <class T, int kRows, int kUnroll, bool kSwiglu>
__device__ __forceinline__ void warp_column(float (&acc)[kRows], float (&acc_up)[kRows], const T* w, int64_t row,
                                            int64_t n, const T* xs, int in, int rows, int lane) {
  constexpr int kV = kVec16<T>;
  const int vecs = in / kV;
  const T* wg = w + row * in;
  const T* wu = w + (row + n) * in;
  for (int v0 = lane; v0 < vecs; v0 += 32 * kUnroll) {
    uint4 rg[kUnroll], ru[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // every load issued before any math
      const int v = v0 + u * 32;
      if (v < vecs) {
        rg[u] = __ldg(reinterpret_cast<const uint4*>(wg) + v);
        if constexpr (kSwiglu) ru[u] = __ldg(reinterpret_cast<const uint4*>(wu) + v);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + u * 32;
      if (v >= vecs) break;
      dot_rows<T, kRows>(acc, rg[u], xs, in, v, rows);
      if constexpr (kSwiglu) dot_rows<T, kRows>(acc_up, ru[u], xs, in, v, rows);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    acc[r] = warp_sum(acc[r]);
    if constexpr (kSwiglu) acc_up[r] = warp_sum(acc_up[r]);
  }
}

template <class T, class OutT, int kRows, bool kSwiglu>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const GemvParams p) {
  // The block's first weight rows (contiguous: its warps' first columns) start towards L2 before the wait for the
  // previous kernel: they do not depend on it, and under PDL the fetch overlaps its tail.
  pdl::grid_begin_prefetch(
      static_cast<const T*>(p.w) + static_cast<int64_t>(blockIdx.x) * kWarps * p.in, first_rows_bytes<T>(p),
      kSwiglu ? static_cast<const T*>(p.w) + (static_cast<int64_t>(blockIdx.x) * kWarps + p.n) * p.in : nullptr,
      kSwiglu ? first_rows_bytes<T>(p) : 0);
  extern __shared__ uint4 staged_raw[];
  T* xs = reinterpret_cast<T*>(staged_raw);
  __shared__ float rstd[kRows];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const T* x = static_cast<const T*>(p.x);
  const T* norm_w = static_cast<const T*>(p.norm_w);
  const int64_t staged = static_cast<int64_t>(p.rows) * p.in;
  // x rows into shared memory; with a norm, each warp first sums the squares of its rows (fp32).
  for (int64_t i = threadIdx.x; i < staged; i += blockDim.x) xs[i] = x[i];
  if (norm_w != nullptr) {
    for (int r = warp; r < p.rows; r += kWarps) {
      float ss = 0.f;
      for (int i = lane; i < p.in; i += 32) {
        const float v = to_f32(x[static_cast<int64_t>(r) * p.in + i]);
        ss += v * v;
      }
      ss = warp_sum(ss);
      if (lane == 0) rstd[r] = 1.f / sqrtf(ss / static_cast<float>(p.in) + p.eps);
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < staged; i += blockDim.x) {
      const int r = static_cast<int>(i / p.in), c = static_cast<int>(i % p.in);
      xs[i] = from_f32<T>(to_f32(xs[i]) * rstd[r] * to_f32(norm_w[c]));
    }
  }
  __syncthreads();

  const T* w = static_cast<const T*>(p.w);
  const T* bias = static_cast<const T*>(p.bias);
  const T* residual = static_cast<const T*>(p.residual);
  OutT* y = static_cast<OutT*>(p.y);
  // Loads in flight per lane: a 2048-wide bf16 row in one round (8 vectors per lane), half that with SwiGLU's two rows.
  constexpr int kUnroll = kSwiglu ? 4 : 8;
  for (int64_t col = static_cast<int64_t>(blockIdx.x) * kWarps + warp; col < p.n;
       col += static_cast<int64_t>(gridDim.x) * kWarps) {
    float acc[kRows] = {}, acc_up[kRows] = {};
    warp_column<T, kRows, kUnroll, kSwiglu>(acc, acc_up, w, col, p.n, xs, p.in, p.rows, lane);
    // Lane r stores row r's result (the warp sums leave every lane with all of them).
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= p.rows || lane != r) continue;
      float v = acc[r];
      if (bias != nullptr) v += to_f32(bias[col]);
      if constexpr (kSwiglu) {
        float up = acc_up[r];
        if (bias != nullptr) up += to_f32(bias[col + p.n]);
        v = silu_times(round_to<T>(v), round_to<T>(up));
      } else if (residual != nullptr) {
        v += to_f32(residual[static_cast<int64_t>(r) * p.n + col]);
      }
      // An f32 output (logits) holds the value as the compute dtype would have stored it.
      if constexpr (std::is_same_v<OutT, T>)
        y[static_cast<int64_t>(r) * p.n + col] = from_f32<T>(v);
      else
        y[static_cast<int64_t>(r) * p.n + col] = round_to<T>(v);
    }
  }
}

template <class T, class OutT, int kRows, bool kSwiglu>
void launch_rows(const GemvParams& p, int device, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(p.rows) * p.in * sizeof(T);
  const int64_t blocks = std::min<int64_t>(ceil_div(p.n, kWarps), int64_t{kBlocksPerSm} * multiprocessors(device));
  pdl::launch(gemv_kernel<T, OutT, kRows, kSwiglu>, static_cast<unsigned>(std::max<int64_t>(blocks, 1)),
              kWarps * 32, smem, stream, p);
}

template <class T, class OutT, bool kSwiglu>
void launch(const GemvParams& p, int device, cudaStream_t stream) {
  if (p.rows <= 1) return launch_rows<T, OutT, 1, kSwiglu>(p, device, stream);
  if (p.rows <= 2) return launch_rows<T, OutT, 2, kSwiglu>(p, device, stream);
  if (p.rows <= 4) return launch_rows<T, OutT, 4, kSwiglu>(p, device, stream);
  launch_rows<T, OutT, kGemvMaxRows, kSwiglu>(p, device, stream);
}

}  // namespace

bool gemv_forward(Tensor& y, const Tensor& x, const Tensor& norm_w, float eps, const Tensor& w, const Tensor& b,
                  const Tensor& residual, bool swiglu) {
  const int64_t in = w.dim(1), n = swiglu ? w.dim(0) / 2 : w.dim(0);
  const int64_t rows = in > 0 ? x.numel() / in : 0;
  const DType dt = x.dtype();
  const int64_t vec = 16 / static_cast<int64_t>(dtype_size(dt));
  if (rows < 1 || rows > kGemvMaxRows || n < 1 || in < 1 || in % vec != 0 || in > INT32_MAX || n > INT32_MAX ||
      rows * in * static_cast<int64_t>(dtype_size(dt)) > kMaxStagedBytes)
    return false;
  if (!all_aligned16(x.raw_data(), w.raw_data(), norm_w.defined() ? norm_w.raw_data() : nullptr)) return false;
  if (y.dtype() != dt && (y.dtype() != DType::f32 || swiglu || residual.defined())) return false;
  const GemvParams p{x.raw_data(),
                     norm_w.defined() ? norm_w.raw_data() : nullptr,
                     w.raw_data(),
                     b.defined() ? b.raw_data() : nullptr,
                     residual.defined() ? residual.raw_data() : nullptr,
                     y.raw_data(),
                     static_cast<int>(rows),
                     static_cast<int>(in),
                     static_cast<int>(n),
                     eps};
  const Device dev = y.device();
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_of(dev);
  dispatch_float(dt, "gemv_forward", [&](auto tag) {
    using T = decltype(tag);
    if (swiglu)
      launch<T, T, true>(p, dev.index, stream);
    else if (y.dtype() == dt)
      launch<T, T, false>(p, dev.index, stream);
    else if constexpr (!std::is_same_v<T, float>)
      launch<T, float, false>(p, dev.index, stream);
  });
  VLM_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace vlm::ops::cuda
