// Ops on packed projections on CUDA: the QKV split (+ RoPE on q and k) of one [T, (Hq + 2 Hkv) * D] projection, its
// backward and its paged form (k/v heads straight into KV cache slots), and SwiGLU on one [T, 2I] gate/up projection
// and its backward. All are pure data movement plus a little math, so they are written for bandwidth: 16-byte loads
// and stores where the rows allow them, a scalar fallback otherwise.
// RoPE angles follow rope.cu's recipe (inverse frequencies computed on the host in double, rounded to f32, passed by
// value; angle = f32(pos) * inv_freq in f32; cosf/sinf; the same rotation expressions), so the split equals
// rope_forward / rope_backward on the split tensors bit for bit. The SwiGLU formulas are those of swiglu_forward /
// swiglu_backward.
//   * QKV vector path (D/2 a multiple of the vector width, every tensor 16-byte aligned): a thread owns one token, one
//     group of kVec16 consecutive frequencies and up to kMaxHeadsPerThread consecutive heads of the packed row
//     (q, k and v heads alike); it issues all its loads, reads the token's position once, computes its cos/sin pairs
//     once (only if one of its heads rotates), then rotates (q, k) or copies (v) its vectors into place.
//   * QKV scalar fallback: one block per token builds the cos/sin table in shared memory; each thread moves pairs.
//   * The paged split (kPaged) runs the same kernels with k and v the caches: token t's k/v heads go to cache row
//     slots[t], read once by each thread that holds k/v heads (-1: not stored; out of range: recorded as an index
//     error and not stored), so the split + paged_kv_write pair becomes one launch with the same bits.
//   * SwiGLU: one thread per 16-byte vector of the output (vector path) or per element (fallback).
#include <climits>
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace vlm::ops::cuda {

namespace {

constexpr int kMaxHalf = 512;          // head_dim <= 1024: the inverse frequencies travel by value (2 KiB)
constexpr int kMaxHeadsPerThread = 4;  // heads one thread of the QKV vector path moves (2 loads in flight per head)
constexpr int kBlock = 256;
constexpr int kScalarBlock = 128;  // the QKV fallback's block (one token)

struct InvFreq {
  float v[kMaxHalf];
};

// One QKV split call. The packed row of token t holds heads() heads of head_dim values: heads_q query heads, then
// heads_kv key heads, then heads_kv value heads; q, k, v hold the same heads contiguously per token (k and v at row
// kv_row: t, or in the paged split the token's cache slot). The first `rotated` heads of the row (q and k, or none)
// are rotated, the others copied.
template <class T>
struct QkvSplit {
  T* packed;                  // [tokens, heads() * head_dim]
  T* q;                       // [tokens, heads_q, head_dim]
  T* k;                       // [tokens, heads_kv, head_dim]; paged: the cache, [num_slots, heads_kv, head_dim]
  T* v;                       // same
  const int32_t* positions;   // [tokens]; null when rotated == 0
  int64_t tokens;
  int heads_q, heads_kv, head_dim;
  int rotated;                // heads_q + heads_kv with RoPE, 0 without
  float direction;            // +1: rotate by +angle (forward); -1: by -angle (backward)
  const int32_t* slots;       // paged: [tokens], token t's cache slot (-1: k/v not stored); null otherwise
  int64_t num_slots;          // paged: cache rows (num_blocks * block_size)
  IndexErrorRecord* rec;      // paged: where a slot outside [-1, num_slots) is recorded

  __device__ int heads() const { return heads_q + 2 * heads_kv; }
  // Head h of token t in the packed row, and in q, k or v (k and v at row kv_row).
  __device__ T* packed_head(int64_t t, int h) const { return packed + (t * heads() + h) * head_dim; }
  __device__ T* split_head(int64_t t, int64_t kv_row, int h) const {
    if (h < heads_q) return q + (t * heads_q + h) * head_dim;
    h -= heads_q;
    if (h < heads_kv) return k + (kv_row * heads_kv + h) * head_dim;
    return v + (kv_row * heads_kv + h - heads_kv) * head_dim;
  }
  // Where head h of token t is read from and written to: packed -> split in the forward, split -> packed backward.
  template <bool kToSplit>
  __device__ const T* src_head(int64_t t, int64_t kv_row, int h) const {
    return kToSplit ? packed_head(t, h) : split_head(t, kv_row, h);
  }
  template <bool kToSplit>
  __device__ T* dst_head(int64_t t, int64_t kv_row, int h) const {
    return kToSplit ? split_head(t, kv_row, h) : packed_head(t, h);
  }
  // Paged: whether token t's k/v heads are stored at `slot` (its slots[t]): not for -1, nor for a slot outside
  // [-1, num_slots), which is recorded when `report`.
  __device__ bool kv_slot_ok(int64_t t, int64_t slot, bool report) const {
    if (slot >= 0 && slot < num_slots) return true;
    if (slot != -1 && report) record_index_error(rec, IndexErrorOp::qkv_paged_slots, t, slot, num_slots);
    return false;
  }
};

// The vector path: thread idx = (token t, head group hg, frequency group fg), fg fastest. Frequencies
// fg * kV .. fg * kV + kV - 1 of heads [hg * heads_per_thread, min(heads, (hg + 1) * heads_per_thread)).
// kPaged (forward only): k/v heads go to cache row slots[t].
template <class T, bool kToSplit, bool kPaged>
__global__ void qkv_split_vec_kernel(const QkvSplit<T> p, int heads_per_thread, int head_groups,
                                     const InvFreq inv_freq) {
  pdl::grid_begin();
  static_assert(kToSplit || !kPaged, "the paged split is a forward");
  constexpr int kV = kVec16<T>;
  const int half = p.head_dim / 2, freq_groups = half / kV;
  const int64_t per_token = static_cast<int64_t>(head_groups) * freq_groups;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= p.tokens * per_token) return;
  const int64_t t = idx / per_token;
  const int rem = static_cast<int>(idx - t * per_token);
  const int hg = rem / freq_groups, fg = rem % freq_groups;
  const int h0 = hg * heads_per_thread;
  int h1 = min(p.heads(), h0 + heads_per_thread);
  int64_t kv_row = t;
  // Paged: only threads holding k/v heads read the slot, in flight with the loads below (which do not depend on it).
  if constexpr (kPaged)
    if (h1 > p.heads_q) kv_row = p.slots[t];
  // Raw 16-byte vectors (4 registers each): all loads in flight before any math or store.
  uint4 lo[kMaxHeadsPerThread], hi[kMaxHeadsPerThread];
#pragma unroll
  for (int u = 0; u < kMaxHeadsPerThread; ++u) {
    if (h0 + u >= h1) break;
    const T* src = p.template src_head<kToSplit>(t, kv_row, h0 + u) + fg * kV;
    lo[u] = *reinterpret_cast<const uint4*>(src);
    hi[u] = *reinterpret_cast<const uint4*>(src + half);
  }
  // Without a cache slot the thread stores its q heads only; the first thread per token holding k/v heads (fg 0 of
  // the group with head heads_q) reports a bad slot.
  if constexpr (kPaged)
    if (h1 > p.heads_q && !p.kv_slot_ok(t, kv_row, fg == 0 && h0 <= p.heads_q)) h1 = max(h0, p.heads_q);
  float c[kV] = {}, s[kV] = {};
  if (h0 < p.rotated) {
    const float pos = static_cast<float>(p.positions[t]);
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      const float angle = pos * inv_freq.v[fg * kV + j];
      c[j] = cosf(angle);  // as rope.cu computes them
      s[j] = p.direction * sinf(angle);
    }
  }
#pragma unroll
  for (int u = 0; u < kMaxHeadsPerThread; ++u) {
    if (h0 + u >= h1) break;
    T* dst = p.template dst_head<kToSplit>(t, kv_row, h0 + u) + fg * kV;
    if (h0 + u < p.rotated) {
      float a[kV], b[kV], out_lo[kV], out_hi[kV];
      load_vec16(reinterpret_cast<const T*>(&lo[u]), a);  // widens the register copy (no memory access)
      load_vec16(reinterpret_cast<const T*>(&hi[u]), b);
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        out_lo[j] = a[j] * c[j] - b[j] * s[j];
        out_hi[j] = b[j] * c[j] + a[j] * s[j];
      }
      store_vec16(dst, out_lo);
      store_vec16(dst + half, out_hi);
    } else {
      *reinterpret_cast<uint4*>(dst) = lo[u];
      *reinterpret_cast<uint4*>(dst + half) = hi[u];
    }
  }
}

// The scalar fallback: block t moves token t; each thread owns pairs (i, i + D/2) of heads. kPaged (forward only):
// k/v heads go to cache row slots[t] (every thread reads it; thread 0 reports a bad one).
template <class T, bool kToSplit, bool kPaged>
__global__ void qkv_split_kernel(const QkvSplit<T> p, const InvFreq inv_freq) {
  pdl::grid_begin();
  static_assert(kToSplit || !kPaged, "the paged split is a forward");
  __shared__ float cos_a[kMaxHalf], sin_a[kMaxHalf];
  const int64_t t = blockIdx.x;
  const int half = p.head_dim / 2;
  int64_t kv_row = t;
  int heads = p.heads();  // the heads this token stores: without a cache slot, its q heads only
  if constexpr (kPaged) {
    kv_row = p.slots[t];
    if (!p.kv_slot_ok(t, kv_row, threadIdx.x == 0)) heads = p.heads_q;
  }
  if (p.rotated > 0 && threadIdx.x < half) {
    const float pos = static_cast<float>(p.positions[t]);
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      const float angle = pos * inv_freq.v[i];
      cos_a[i] = cosf(angle);
      sin_a[i] = p.direction * sinf(angle);
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j < heads * half; j += blockDim.x) {
    const int h = j / half, i = j % half;
    const T* src = p.template src_head<kToSplit>(t, kv_row, h);
    T* dst = p.template dst_head<kToSplit>(t, kv_row, h);
    if (h < p.rotated) {
      const float a = to_f32(src[i]), b = to_f32(src[i + half]), c = cos_a[i], s = sin_a[i];
      dst[i] = from_f32<T>(a * c - b * s);
      dst[i + half] = from_f32<T>(b * c + a * s);
    } else {
      dst[i] = src[i];
      dst[i + half] = src[i + half];
    }
  }
}

// The forward (kToSplit: packed = qkv read, q/k/v written) or the backward (packed = dqkv written, q/k/v = dq/dk/dv
// read) on validated tensors. kPaged: the forward with k, v the caches [num_blocks, block_size, Hkv, D] and token t's
// k/v heads written to slot slots[t].
template <bool kToSplit, bool kPaged = false>
void qkv_split(const char* op, const Tensor& packed, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& positions, float theta, const Tensor& slots = Tensor()) {
  const int64_t tokens = q.dim(0), heads_q = q.dim(1), heads_kv = k.dim(-2), head_dim = q.dim(2), half = head_dim / 2;
  VLM_CHECK(half <= kMaxHalf, "ops::", op, ": head dim ", head_dim, " exceeds the CUDA kernel's ", 2 * kMaxHalf);
  const int64_t heads = heads_q + 2 * heads_kv;
  VLM_CHECK(heads * half <= INT_MAX, "ops::", op, ": ", heads, " heads of dim ", head_dim,
            " are more than the CUDA kernel handles");
  if (tokens == 0 || heads == 0 || half == 0) return;
  const bool rotate = theta > 0.f;
  InvFreq inv_freq{};
  if (rotate)
    for (int64_t i = 0; i < half; ++i)
      inv_freq.v[i] =
          static_cast<float>(1.0 / std::pow(static_cast<double>(theta), 2.0 * static_cast<double>(i) / head_dim));
  const Device dev = packed.device();
  DeviceGuard guard(dev);
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const QkvSplit<T> p{ptr<T>(packed),
                        ptr<T>(q),
                        ptr<T>(k),
                        ptr<T>(v),
                        rotate ? ptr<int32_t>(positions) : nullptr,
                        tokens,
                        static_cast<int>(heads_q),
                        static_cast<int>(heads_kv),
                        static_cast<int>(head_dim),
                        rotate ? static_cast<int>(heads_q + heads_kv) : 0,
                        kToSplit ? 1.f : -1.f,
                        kPaged ? ptr<int32_t>(slots) : nullptr,
                        kPaged ? k.dim(0) * k.dim(1) : 0,
                        kPaged ? index_error_record(dev) : nullptr};
    cudaStream_t stream = stream_of(dev);
    if (half % kVec16<T> == 0 && all_aligned16(p.packed, p.q, p.k, p.v)) {
      const int head_groups = static_cast<int>(ceil_div(heads, kMaxHeadsPerThread));
      const int heads_per_thread = static_cast<int>(ceil_div(heads, head_groups));
      const int64_t threads = tokens * head_groups * (half / kVec16<T>);
      pdl::launch(qkv_split_vec_kernel<T, kToSplit, kPaged>, static_cast<unsigned>(ceil_div(threads, kBlock)), kBlock,
                  0, stream, p, heads_per_thread, head_groups, inv_freq);
    } else {
      pdl::launch(qkv_split_kernel<T, kToSplit, kPaged>, static_cast<unsigned>(tokens), kScalarBlock, 0, stream, p,
                  inv_freq);
    }
  });
  VLM_CUDA_CHECK_LAUNCH();
  if constexpr (kPaged) check_index_errors_now(op, dev);
}

// ---- SwiGLU on gu [rows, 2 * cols] ------------------------------------------------------------------------------

// silu(g) * u and its gradients, as swiglu_forward / swiglu_backward compute them.
__device__ __forceinline__ float swiglu_value(float g, float u) {
  const float sig = 1.f / (1.f + expf(-g));
  return g * sig * u;
}
__device__ __forceinline__ void swiglu_grads(float d, float g, float u, float& dgate, float& dup) {
  const float sig = 1.f / (1.f + expf(-g));
  dgate = d * u * sig * (1.f + g * (1.f - sig));
  dup = d * g * sig;
}

// Vector path: item idx = (row r, vector c of the row's cols / kV).
template <class T>
__global__ void swiglu_packed_vec_kernel(T* y, const T* gu, int64_t rows, int64_t cols) {
  pdl::grid_begin();
  constexpr int kV = kVec16<T>;
  const int64_t vecs = cols / kV;
  VLM_GRID_STRIDE_LOOP(idx, rows * vecs) {
    const int64_t r = idx / vecs, c = (idx - r * vecs) * kV;
    const T* gate = gu + r * 2 * cols + c;
    float g[kV], u[kV], out[kV];
    load_vec16(gate, g);
    load_vec16(gate + cols, u);
#pragma unroll
    for (int j = 0; j < kV; ++j) out[j] = swiglu_value(g[j], u[j]);
    store_vec16(y + r * cols + c, out);
  }
}

template <class T>
__global__ void swiglu_packed_kernel(T* y, const T* gu, int64_t rows, int64_t cols) {
  pdl::grid_begin();
  VLM_GRID_STRIDE_LOOP(i, rows * cols) {
    const int64_t r = i / cols, c = i - r * cols;
    const T* gate = gu + r * 2 * cols + c;
    y[i] = from_f32<T>(swiglu_value(to_f32(gate[0]), to_f32(gate[cols])));
  }
}

// dgu may equal gu: each item reads its gate/up values before writing their gradients in the same places.
template <class T>
__global__ void swiglu_packed_backward_vec_kernel(T* dgu, const T* dy, const T* gu, int64_t rows, int64_t cols) {
  pdl::grid_begin();
  constexpr int kV = kVec16<T>;
  const int64_t vecs = cols / kV;
  VLM_GRID_STRIDE_LOOP(idx, rows * vecs) {
    const int64_t r = idx / vecs, c = (idx - r * vecs) * kV;
    const int64_t at = r * 2 * cols + c;
    float d[kV], g[kV], u[kV], dg[kV], du[kV];
    load_vec16(dy + r * cols + c, d);
    load_vec16(gu + at, g);
    load_vec16(gu + at + cols, u);
#pragma unroll
    for (int j = 0; j < kV; ++j) swiglu_grads(d[j], g[j], u[j], dg[j], du[j]);
    store_vec16(dgu + at, dg);
    store_vec16(dgu + at + cols, du);
  }
}

template <class T>
__global__ void swiglu_packed_backward_kernel(T* dgu, const T* dy, const T* gu, int64_t rows, int64_t cols) {
  pdl::grid_begin();
  VLM_GRID_STRIDE_LOOP(i, rows * cols) {
    const int64_t r = i / cols, c = i - r * cols;
    const int64_t at = r * 2 * cols + c;
    float dg, du;
    swiglu_grads(to_f32(dy[i]), to_f32(gu[at]), to_f32(gu[at + cols]), dg, du);
    dgu[at] = from_f32<T>(dg);
    dgu[at + cols] = from_f32<T>(du);
  }
}

}  // namespace

void qkv_split_forward(Tensor& q, Tensor& k, Tensor& v, const Tensor& qkv, const Tensor& positions, float theta) {
  qkv_split<true>("qkv_split_forward", qkv, q, k, v, positions, theta);
}

void qkv_split_backward(Tensor& dqkv, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& positions,
                        float theta) {
  qkv_split<false>("qkv_split_backward", dqkv, dq, dk, dv, positions, theta);
}

void qkv_split_paged_write(Tensor& q, Tensor& k_cache, Tensor& v_cache, const Tensor& qkv, const Tensor& positions,
                           const Tensor& slot_mapping, float theta) {
  qkv_split<true, true>("qkv_split_paged_write", qkv, q, k_cache, v_cache, positions, theta, slot_mapping);
}

void swiglu_packed_forward(Tensor& y, const Tensor& gu) {
  if (y.numel() == 0) return;
  const int64_t cols = y.dim(-1), rows = y.numel() / cols;
  DeviceGuard guard(y.device());
  dispatch_float(y.dtype(), "swiglu_packed_forward", [&](auto tag) {
    using T = decltype(tag);
    cudaStream_t stream = stream_of(y.device());
    if (cols % kVec16<T> == 0 && all_aligned16(ptr<T>(y), ptr<T>(gu))) {
      const int64_t n = rows * (cols / kVec16<T>);
      pdl::launch(swiglu_packed_vec_kernel<T>, grid_for(n, kBlock), kBlock, 0, stream, ptr<T>(y), ptr<T>(gu), rows,
                  cols);
    } else {
      pdl::launch(swiglu_packed_kernel<T>, grid_for(rows * cols, kBlock), kBlock, 0, stream, ptr<T>(y), ptr<T>(gu),
                  rows, cols);
    }
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void swiglu_packed_backward(Tensor& dgu, const Tensor& dy, const Tensor& gu) {
  if (dy.numel() == 0) return;
  const int64_t cols = dy.dim(-1), rows = dy.numel() / cols;
  DeviceGuard guard(dgu.device());
  dispatch_float(dy.dtype(), "swiglu_packed_backward", [&](auto tag) {
    using T = decltype(tag);
    cudaStream_t stream = stream_of(dgu.device());
    if (cols % kVec16<T> == 0 && all_aligned16(ptr<T>(dgu), ptr<T>(dy), ptr<T>(gu))) {
      const int64_t n = rows * (cols / kVec16<T>);
      pdl::launch(swiglu_packed_backward_vec_kernel<T>, grid_for(n, kBlock), kBlock, 0, stream, ptr<T>(dgu), ptr<T>(dy),
                  ptr<T>(gu), rows, cols);
    } else {
      pdl::launch(swiglu_packed_backward_kernel<T>, grid_for(rows * cols, kBlock), kBlock, 0, stream, ptr<T>(dgu),
                  ptr<T>(dy), ptr<T>(gu), rows, cols);
    }
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::ops::cuda
