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
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace vlm::ops::cuda {

namespace {

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

template <class T, class OutT, int kRows, int kMode>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const GemvParams p, const QkvOut o, const RopeFreq freq) {
  // The block's first weight rows (its warps' first columns) start towards L2 before the wait for the previous
  // kernel: they do not depend on it, and under PDL the fetch overlaps its tail.
  pdl::grid_begin_prefetch(static_cast<const T*>(p.w) + row_a<kMode>(p, o, first_col(p)) * p.in,
                           first_rows_bytes<T>(p),
                           static_cast<const T*>(p.w) + row_b<kMode>(p, o, first_col(p)) * p.in,
                           kMode != kPlain ? first_rows_bytes<T>(p) : 0);
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

template <class T, class OutT, int kRows, int kMode>
void launch_rows(const GemvParams& p, const QkvOut& o, const RopeFreq& freq, int device, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(p.rows) * p.in * sizeof(T);
  const int64_t blocks = std::min<int64_t>(ceil_div(p.n, kWarps), int64_t{kBlocksPerSm} * multiprocessors(device));
  pdl::launch(gemv_kernel<T, OutT, kRows, kMode>, static_cast<unsigned>(std::max<int64_t>(blocks, 1)), kWarps * 32,
              smem, stream, p, o, freq);
}

template <class T, class OutT, int kMode>
void launch(const GemvParams& p, const QkvOut& o, const RopeFreq& freq, int device, cudaStream_t stream) {
  if (p.rows <= 1) return launch_rows<T, OutT, 1, kMode>(p, o, freq, device, stream);
  if (p.rows <= 2) return launch_rows<T, OutT, 2, kMode>(p, o, freq, device, stream);
  if (p.rows <= 4) return launch_rows<T, OutT, 4, kMode>(p, o, freq, device, stream);
  launch_rows<T, OutT, kGemvMaxRows, kMode>(p, o, freq, device, stream);
}

// Whether the GEMV takes x [rows, in] @ w^T (dtype dt): few rows, 16-byte rows and pointers, x fits shared memory.
bool gemv_fits(const Tensor& x, const Tensor& w, const Tensor& norm_w, int64_t rows) {
  const int64_t in = w.dim(1), es = static_cast<int64_t>(dtype_size(x.dtype()));
  return rows >= 1 && rows <= kGemvMaxRows && in >= 1 && (in * es) % 16 == 0 && in <= INT32_MAX &&
         w.dim(0) <= INT32_MAX && rows * in * es <= kMaxStagedBytes &&
         all_aligned16(x.raw_data(), w.raw_data(), norm_w.defined() ? norm_w.raw_data() : nullptr);
}

GemvParams gemv_params(const Tensor& y, const Tensor& x, const Tensor& norm_w, float eps, const Tensor& w,
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

}  // namespace

bool gemv_forward(Tensor& y, const Tensor& x, const Tensor& norm_w, float eps, const Tensor& w, const Tensor& b,
                  const Tensor& residual, bool swiglu) {
  const DType dt = x.dtype();
  const int64_t in = w.dim(1), n = swiglu ? w.dim(0) / 2 : w.dim(0), rows = in > 0 ? x.numel() / in : 0;
  if (n < 1 || !gemv_fits(x, w, norm_w, rows)) return false;
  if (y.dtype() != dt && (y.dtype() != DType::f32 || swiglu || residual.defined())) return false;
  const GemvParams p = gemv_params(y, x, norm_w, eps, w, b, residual, rows, n);
  const Device dev = y.device();
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_of(dev);
  const QkvOut none{};
  const RopeFreq no_freq{};
  dispatch_float(dt, "gemv_forward", [&](auto tag) {
    using T = decltype(tag);
    if (swiglu)
      launch<T, T, kSwiglu>(p, none, no_freq, dev.index, stream);
    else if (y.dtype() == dt)
      launch<T, T, kPlain>(p, none, no_freq, dev.index, stream);
    else if constexpr (!std::is_same_v<T, float>)
      launch<T, float, kPlain>(p, none, no_freq, dev.index, stream);
  });
  VLM_CUDA_CHECK_LAUNCH();
  return true;
}

bool gemv_qkv_paged_write(Tensor& q, Tensor& k_cache, Tensor& v_cache, const Tensor& x, const Tensor& norm_w,
                          float eps, const Tensor& w, const Tensor& b, const Tensor& positions,
                          const Tensor& slot_mapping, float theta) {
  const int64_t rows = q.dim(0), heads_q = q.dim(1), dim = q.dim(2), heads_kv = k_cache.dim(2);
  if (dim / 2 > kMaxRopeHalf || !gemv_fits(x, w, norm_w, rows)) return false;
  const int64_t pairs = (heads_q + 2 * heads_kv) * (dim / 2);
  const GemvParams p = gemv_params(Tensor(), x, norm_w, eps, w, b, Tensor(), rows, pairs);
  const Device dev = q.device();
  QkvOut o{q.raw_data(),
           k_cache.raw_data(),
           v_cache.raw_data(),
           theta > 0.f ? ptr<int32_t>(positions) : nullptr,
           ptr<int32_t>(slot_mapping),
           k_cache.dim(0) * k_cache.dim(1),
           index_error_record(dev),
           static_cast<int>(heads_q),
           static_cast<int>(heads_kv),
           static_cast<int>(dim)};
  RopeFreq freq{};
  if (theta > 0.f) {
    const std::vector<float> inv_freq = cpu::rope_inv_freq(dim, theta);  // the recipe of every RoPE path
    std::copy(inv_freq.begin(), inv_freq.end(), freq.v);
  }
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_of(dev);
  dispatch_float(x.dtype(), "rmsnorm_qkv_paged_write", [&](auto tag) {
    using T = decltype(tag);
    launch<T, T, kQkv>(p, o, freq, dev.index, stream);
  });
  VLM_CUDA_CHECK_LAUNCH();
  check_index_errors_now("rmsnorm_qkv_paged_write", dev);
  return true;
}

}  // namespace vlm::ops::cuda
