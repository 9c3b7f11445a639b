// The GEMV's per-block work as device functions (see gemv.cu for the design): gemv.cu's kernel runs it once per block,
// and the fused decode layer (decode_layer.cu) runs its phases with it inside one persistent kernel, so the two give
// the same bits.
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/pdl.cuh"

namespace vlm::ops::cuda::gemv {

constexpr int kWarps = 4;                      // warps per block
constexpr int kBlocksPerSm = 4;                // grid cap: blocks per SM (each stages x once)
constexpr int64_t kMaxStagedBytes = 32 << 10;  // x rows in shared memory (under the 48 KiB needing no opt-in)

// What a warp computes per output column, and where it goes.
enum Mode : int {
  kPlain = 0,   // y[r, col] = w row col . x_r (+ bias, + residual)
  kSwiglu = 1,  // y[r, col] = silu(w row col . x_r) * (w row col + n . x_r)
  kQkv = 2,     // the packed QKV projection, RoPE and the paged KV write: column = (head, frequency pair)
};

// The QKV epilogue's outputs (mode kQkv): column col is the frequency pair (i, i + D/2) of packed head h = col / (D/2),
// weight rows h * D + i and h * D + i + D/2. q heads go to q, k heads (rotated too) and v heads to cache slot slots[r].
struct QkvOut {
  void* q;                     // [rows, heads_q, head_dim]
  void* k_cache;               // [num_slots, heads_kv, head_dim]
  void* v_cache;               // same
  const int32_t* positions;    // [rows]; null: no rotation
  const int32_t* slots;        // [rows]; -1: the row's k/v are not stored
  int64_t num_slots;
  IndexErrorRecord* rec;       // where a slot outside [-1, num_slots) is recorded
  int heads_q, heads_kv, head_dim;
};
constexpr int kMaxRopeHalf = 128;  // head_dim <= 256 for the fused QKV epilogue
struct RopeFreq {
  float v[kMaxRopeHalf];  // inverse frequencies, computed on the host as the QKV split's
};

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

// The block's first column, clamped into the matrix (no reads of memory).
__device__ __forceinline__ int64_t first_col(const GemvParams& p) {
  return min(static_cast<int64_t>(blockIdx.x) * kWarps, static_cast<int64_t>(p.n) - 1);
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

// One warp's dot products of weight row wa (and, when kTwo, row wb) against the staged rows.
template <class T, int kRows, int kUnroll, bool kTwo>
__device__ __forceinline__ void warp_column(float (&acc)[kRows], float (&acc_b)[kRows], const T* wa, const T* wb,
                                            const T* xs, int in, int rows, int lane) {
  constexpr int kV = kVec16<T>;
  const int vecs = in / kV;
  for (int v0 = lane; v0 < vecs; v0 += 32 * kUnroll) {
    uint4 ra[kUnroll], rb[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // every load issued before any math
      const int v = v0 + u * 32;
      if (v < vecs) {
        ra[u] = __ldg(reinterpret_cast<const uint4*>(wa) + v);
        if constexpr (kTwo) rb[u] = __ldg(reinterpret_cast<const uint4*>(wb) + v);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + u * 32;
      if (v >= vecs) break;
      dot_rows<T, kRows>(acc, ra[u], xs, in, v, rows);
      if constexpr (kTwo) dot_rows<T, kRows>(acc_b, rb[u], xs, in, v, rows);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    acc[r] = warp_sum(acc[r]);
    if constexpr (kTwo) acc_b[r] = warp_sum(acc_b[r]);
  }
}

// The weight rows of column col: row a, and row b for the two-row modes.
template <int kMode>
__device__ __forceinline__ int64_t row_a([[maybe_unused]] const GemvParams& p, [[maybe_unused]] const QkvOut& o,
                                         int64_t col) {
  if constexpr (kMode == kQkv) {
    const int half = o.head_dim / 2;
    return (col / half) * o.head_dim + col % half;
  }
  return col;
}
template <int kMode>
__device__ __forceinline__ int64_t row_b([[maybe_unused]] const GemvParams& p, [[maybe_unused]] const QkvOut& o,
                                         int64_t col) {
  if constexpr (kMode == kQkv) return row_a<kMode>(p, o, col) + o.head_dim / 2;
  return col + p.n;
}

// The kQkv epilogue of row r: a and b are the pair's products as the packed projection would hold them.
template <class T>
__device__ __forceinline__ void store_qkv_pair(const QkvOut& o, const RopeFreq& freq, int r, int64_t col, float a,
                                               float b) {
  const int half = o.head_dim / 2, h = static_cast<int>(col / half), i = static_cast<int>(col % half);
  if (o.positions != nullptr && h < o.heads_q + o.heads_kv) {  // q and k heads rotate (the QKV split's math)
    const float angle = static_cast<float>(o.positions[r]) * freq.v[i];
    const float c = cosf(angle), s = sinf(angle);
    const float ra = a * c - b * s, rb = b * c + a * s;
    a = ra;
    b = rb;
  }
  T* dst;
  if (h < o.heads_q) {
    dst = static_cast<T*>(o.q) + (static_cast<int64_t>(r) * o.heads_q + h) * o.head_dim;
  } else {
    const int64_t slot = o.slots[r];
    if (slot < 0 || slot >= o.num_slots) {
      if (slot != -1 && h == o.heads_q && i == 0)
        record_index_error(o.rec, IndexErrorOp::qkv_paged_slots, r, slot, o.num_slots);
      return;
    }
    const int kv = h - o.heads_q;
    T* cache = static_cast<T*>(kv < o.heads_kv ? o.k_cache : o.v_cache);
    dst = cache + (slot * o.heads_kv + kv % o.heads_kv) * o.head_dim;
  }
  dst[i] = from_f32<T>(a);
  dst[i + half] = from_f32<T>(b);
}

// The block's share of the product: stages the call's x rows (normalized when p.norm_w) in xs (shared memory of
// rows x in elements of T), then its warps take columns blockIdx.x * kWarps + warp, + gridDim.x * kWarps, ... The
// caller has waited for x; the block's threads all call it.
template <class T, class OutT, int kRows, int kMode>
__device__ __forceinline__ void gemv_block(const GemvParams& p, const QkvOut& o, const RopeFreq& freq, T* xs) {
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
  // Loads in flight per lane: a 2048-wide bf16 row in one round (8 vectors per lane), half that per row with two.
  constexpr int kUnroll = kMode == kPlain ? 8 : 4;
  for (int64_t col = static_cast<int64_t>(blockIdx.x) * kWarps + warp; col < p.n;
       col += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t ra = row_a<kMode>(p, o, col), rb = row_b<kMode>(p, o, col);
    float acc[kRows] = {}, acc_b[kRows] = {};
    warp_column<T, kRows, kUnroll, kMode != kPlain>(acc, acc_b, w + ra * p.in, w + rb * p.in, xs, p.in, p.rows,
                                                      lane);
    // Lane r stores row r's result (the warp sums leave every lane with all of them).
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= p.rows || lane != r) continue;
      float v = acc[r];
      if (bias != nullptr) v += to_f32(bias[ra]);
      if constexpr (kMode != kPlain) {
        float vb = acc_b[r];
        if (bias != nullptr) vb += to_f32(bias[rb]);
        if constexpr (kMode == kSwiglu)
          y[static_cast<int64_t>(r) * p.n + col] = from_f32<T>(silu_times(round_to<T>(v), round_to<T>(vb)));
        else
          store_qkv_pair<T>(o, freq, r, col, round_to<T>(v), round_to<T>(vb));
        continue;
      }
      if (residual != nullptr) v += to_f32(residual[static_cast<int64_t>(r) * p.n + col]);
      // An f32 output (logits) holds the value as the compute dtype would have stored it.
      if constexpr (std::is_same_v<OutT, T>)
        y[static_cast<int64_t>(r) * p.n + col] = from_f32<T>(v);
      else
        y[static_cast<int64_t>(r) * p.n + col] = round_to<T>(v);
    }
  }
}

// Starts this block's weight rows (every column it will take) towards L2: they depend on no earlier kernel or phase.
template <class T, int kMode>
__device__ __forceinline__ void prefetch_block_rows(const GemvParams& p, const QkvOut& o) {
  constexpr int64_t kLine = 128;
  const int64_t row_bytes = static_cast<int64_t>(p.in) * sizeof(T);
  const int64_t lines = (row_bytes + kLine - 1) / kLine;
  const char* w = static_cast<const char*>(p.w);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t cols = p.n > static_cast<int64_t>(blockIdx.x) * kWarps
                           ? (p.n - static_cast<int64_t>(blockIdx.x) * kWarps + stride - 1) / stride * kWarps
                           : 0;  // an upper bound: the block's columns come kWarps at a time
  const int64_t per_col = (kMode != kPlain ? 2 : 1) * lines;
  for (int64_t i = threadIdx.x; i < cols * per_col; i += blockDim.x) {
    const int64_t c = i / per_col, k = i % per_col;
    const int64_t col = (c / kWarps) * stride + static_cast<int64_t>(blockIdx.x) * kWarps + c % kWarps;
    if (col >= p.n) continue;
    const int64_t row = k < lines ? row_a<kMode>(p, o, col) : row_b<kMode>(p, o, col);
    asm volatile("prefetch.global.L2 [%0];" ::"l"(w + row * row_bytes + (k % lines) * kLine));
  }
}

// ---- host side ----

// Whether the GEMV takes x [rows, in] @ w^T (dtype dt): few rows, 16-byte rows and pointers, x fits shared memory.
inline bool gemv_fits(const Tensor& x, const Tensor& w, const Tensor& norm_w, int64_t rows) {
  const int64_t in = w.dim(1), es = static_cast<int64_t>(dtype_size(x.dtype()));
  return rows >= 1 && rows <= kGemvMaxRows && in >= 1 && (in * es) % 16 == 0 && in <= INT32_MAX &&
         w.dim(0) <= INT32_MAX && rows * in * es <= kMaxStagedBytes &&
         all_aligned16(x.raw_data(), w.raw_data(), norm_w.defined() ? norm_w.raw_data() : nullptr);
}

inline GemvParams gemv_params(const Tensor& y, const Tensor& x, const Tensor& norm_w, float eps, const Tensor& w,
                       const Tensor& b, const Tensor& residual, int64_t rows, int64_t n) {
  return {x.raw_data(),
          norm_w.defined() ? norm_w.raw_data() : nullptr,
          w.raw_data(),
          b.defined() ? b.raw_data() : nullptr,
          residual.defined() ? residual.raw_data() : nullptr,
          y.defined() ? y.raw_data() : nullptr,
          static_cast<int>(rows),
          static_cast<int>(w.dim(1)),
          static_cast<int>(n),
          eps};
}

// The QKV epilogue's outputs for q [rows, Hq, D] and the caches [blocks, block_size, Hkv, D] (theta 0: no rotation).
inline QkvOut qkv_out(Tensor& q, Tensor& k_cache, Tensor& v_cache, const Tensor& positions, const Tensor& slot_mapping,
                      float theta) {
  return {q.raw_data(),
          k_cache.raw_data(),
          v_cache.raw_data(),
          theta > 0.f ? ptr<int32_t>(positions) : nullptr,
          ptr<int32_t>(slot_mapping),
          k_cache.dim(0) * k_cache.dim(1),
          index_error_record(q.device()),
          static_cast<int>(q.dim(1)),
          static_cast<int>(k_cache.dim(2)),
          static_cast<int>(q.dim(2))};
}

// RoPE's inverse frequencies for head dim `dim` (<= 2 kMaxRopeHalf), by the recipe of every RoPE path.
inline RopeFreq rope_freq(int64_t dim, float theta) {
  RopeFreq freq{};
  if (theta > 0.f) {
    const std::vector<float> inv_freq = cpu::rope_inv_freq(dim, theta);
    std::copy(inv_freq.begin(), inv_freq.end(), freq.v);
  }
  return freq;
}

}  // namespace vlm::ops::cuda::gemv
