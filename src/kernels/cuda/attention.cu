// Attention on CUDA. bf16 goes to our FlashAttention kernels (cuda/flash; the fastest backward, the Hopper one where
// it applies, unless ops::set_attention_deterministic(true) asks for the deterministic one) whenever they support
// the problem (head dim a multiple of 8 up to 256, aligned) and ops::set_attention_flash has not turned them off; f32,
// and bf16 problems flash declines, run the simple kernels below: the correct-CUDA-attention fallback, the fp32 parity
// path and the baseline flash is benchmarked against (speed is not their goal).
//
// Simple kernels (semantics of ops::attention_forward: varlen, GQA, bottom-right causal, lse, rows that see no key
// give out = 0 and lse = -inf). One warp per (sequence, head, row), lanes over the head dim:
//   forward: an online softmax over the visible keys (one warp-reduced dot product per key);
//   backward: delta = dout . out per (row, head); dq with one warp per query row; dk and dv with one warp per key
//   row, looping over the q heads of its group and the queries that see the key, in order: every gradient element
//   is summed by one lane in a fixed order, so runs are bit-reproducible without atomics.
// cu_seqlens are checked by a one-block kernel that records violations (cuda_context.h); the main kernels clamp
// them so a bad table cannot make them read or write out of bounds.

#include <atomic>

#include "core/env.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/flash/flash_api.h"

namespace vlm::ops::cuda {

namespace {

constexpr int kWarps = 4;            // rows per block
constexpr int kMaxSimpleDim = 512;   // head dims of the simple kernels (shared memory: 4 rows x 4 vectors x D)

template <class T>
struct AttnArgs {
  const T* q;  // [tokens_q, heads_q, dim]
  const T* k;  // [tokens_k, heads_kv, dim]
  const T* v;
  const int32_t* cu_q;
  const int32_t* cu_k;
  int64_t tokens_q, tokens_k;
  int heads_q, heads_kv, dim;
  int max_q, max_k;
  float scale;
  bool causal;
};

// Row range [begin, begin + len) of sequence b, clamped into [0, tokens] and to max_len (the check kernel reports
// any violation; clamping keeps a bad table in bounds).
struct SeqRange {
  int64_t begin, len;
};
__device__ __forceinline__ SeqRange seq_range(const int32_t* cu, int b, int64_t tokens, int max_len) {
  const int64_t begin = min(max(static_cast<int64_t>(cu[b]), int64_t{0}), tokens);
  const int64_t end = min(max(static_cast<int64_t>(cu[b + 1]), begin), tokens);
  return {begin, min(end - begin, static_cast<int64_t>(max_len))};
}

// Keys [0, n) that query i sees (bottom-right causal alignment).
__device__ __forceinline__ int64_t visible_keys(int64_t i, int64_t lq, int64_t lk, bool causal) {
  if (!causal) return lk;
  return min(max(i + lk - lq + 1, int64_t{0}), lk);
}

// sum_d a[d] * b[d] over the warp (a in shared memory, b in global memory), lanes strided by 32.
template <class T>
__device__ __forceinline__ float warp_dot(const float* a, const T* b, int dim, int lane) {
  float s = 0.f;
  for (int d = lane; d < dim; d += 32) s += a[d] * to_f32(b[d]);
  return warp_sum(s);
}

__global__ void check_cu_seqlens_kernel(const int32_t* cu, int batch, int64_t tokens, int max_len,
                                        IndexErrorRecord* rec) {
  pdl::grid_begin();
  for (int b = threadIdx.x; b <= batch; b += blockDim.x) {
    const int64_t c = cu[b];
    bool ok = b == 0 ? c == 0 : (c >= cu[b - 1] && c - cu[b - 1] <= max_len);
    if (b == batch) ok = ok && c == tokens;
    if (!ok) record_index_error(rec, IndexErrorOp::attention_cu_seqlens, b, c, tokens);
  }
}

template <class T>
__global__ void attention_forward_kernel(AttnArgs<T> a, T* out, float* lse) {
  pdl::grid_begin();
  extern __shared__ float smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.z, h = blockIdx.y, kvh = h / (a.heads_q / a.heads_kv), dim = a.dim;
  const SeqRange sq = seq_range(a.cu_q, b, a.tokens_q, a.max_q), sk = seq_range(a.cu_k, b, a.tokens_k, a.max_k);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (i >= sq.len) return;
  float* qs = smem + warp * 2 * dim;  // each lane touches only its own d (d = lane mod 32): no syncs needed
  float* acc = qs + dim;
  const int64_t row = (sq.begin + i) * a.heads_q + h;
  for (int d = lane; d < dim; d += 32) {
    qs[d] = to_f32(a.q[row * dim + d]);
    acc[d] = 0.f;
  }
  const int64_t n = visible_keys(i, sq.len, sk.len, a.causal);
  float m = -INFINITY, l = 0.f;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t key = (sk.begin + j) * a.heads_kv + kvh;
    const float s = a.scale * warp_dot(qs, a.k + key * dim, dim, lane);
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
    const T* vj = a.v + key * dim;
    for (int d = lane; d < dim; d += 32) acc[d] = acc[d] * corr + p * to_f32(vj[d]);
    m = m_new;
  }
  const float inv_l = n > 0 ? 1.f / l : 0.f;
  for (int d = lane; d < dim; d += 32) out[row * dim + d] = from_f32<T>(acc[d] * inv_l);
  if (lane == 0) lse[static_cast<int64_t>(h) * a.tokens_q + sq.begin + i] = n > 0 ? m + logf(l) : -INFINITY;
}

// delta[h, t] = dout[t, h, :] . out[t, h, :] for every row (f32).
template <class T>
__global__ void attention_delta_kernel(float* delta, const T* dout, const T* out, int64_t tokens, int heads,
                                       int dim) {
  pdl::grid_begin();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int h = blockIdx.y;
  if (t >= tokens) return;
  const int64_t base = (t * heads + h) * dim;
  float s = 0.f;
  for (int d = lane; d < dim; d += 32) s += to_f32(dout[base + d]) * to_f32(out[base + d]);
  s = warp_sum(s);
  if (lane == 0) delta[static_cast<int64_t>(h) * tokens + t] = s;
}

// dq_i = scale * sum_j p_ij (dout_i . v_j - delta_i) k_j,  p_ij = exp(scale q_i . k_j - lse_i).
template <class T>
__global__ void attention_dq_kernel(AttnArgs<T> a, T* dq, const T* dout, const float* lse, const float* delta) {
  pdl::grid_begin();
  extern __shared__ float smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.z, h = blockIdx.y, kvh = h / (a.heads_q / a.heads_kv), dim = a.dim;
  const SeqRange sq = seq_range(a.cu_q, b, a.tokens_q, a.max_q), sk = seq_range(a.cu_k, b, a.tokens_k, a.max_k);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (i >= sq.len) return;
  float* qs = smem + warp * 3 * dim;
  float* dos = qs + dim;
  float* acc = dos + dim;
  const int64_t row = (sq.begin + i) * a.heads_q + h;
  const int64_t stat = static_cast<int64_t>(h) * a.tokens_q + sq.begin + i;
  const float lse_i = lse[stat], delta_i = delta[stat];
  const int64_t n = visible_keys(i, sq.len, sk.len, a.causal);
  for (int d = lane; d < dim; d += 32) {
    qs[d] = to_f32(a.q[row * dim + d]);
    dos[d] = to_f32(dout[row * dim + d]);
    acc[d] = 0.f;
  }
  if (lse_i != -INFINITY) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t key = (sk.begin + j) * a.heads_kv + kvh;
      const T* kj = a.k + key * dim;
      const float p = expf(a.scale * warp_dot(qs, kj, dim, lane) - lse_i);
      const float ds = p * (warp_dot(dos, a.v + key * dim, dim, lane) - delta_i);
      for (int d = lane; d < dim; d += 32) acc[d] += ds * to_f32(kj[d]);
    }
  }
  for (int d = lane; d < dim; d += 32) dq[row * dim + d] = from_f32<T>(a.scale * acc[d]);
}

// dk_j = scale * sum_{h in group, i sees j} ds_ij q_i;  dv_j = sum p_ij dout_i.  dk or dv may be null.
template <class T>
__global__ void attention_dkdv_kernel(AttnArgs<T> a, T* dk, T* dv, const T* dout, const float* lse,
                                      const float* delta) {
  pdl::grid_begin();
  extern __shared__ float smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.z, kvh = blockIdx.y, dim = a.dim, group = a.heads_q / a.heads_kv;
  const SeqRange sq = seq_range(a.cu_q, b, a.tokens_q, a.max_q), sk = seq_range(a.cu_k, b, a.tokens_k, a.max_k);
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (j >= sk.len) return;
  float* ks = smem + warp * 4 * dim;
  float* vs = ks + dim;
  float* dk_acc = vs + dim;
  float* dv_acc = dk_acc + dim;
  const int64_t key = (sk.begin + j) * a.heads_kv + kvh;
  for (int d = lane; d < dim; d += 32) {
    ks[d] = to_f32(a.k[key * dim + d]);
    vs[d] = to_f32(a.v[key * dim + d]);
    dk_acc[d] = 0.f;
    dv_acc[d] = 0.f;
  }
  // Query i sees key j when j <= i + lk - lq (causal), i.e. i >= j - lk + lq.
  const int64_t first = a.causal ? max(j - sk.len + sq.len, int64_t{0}) : 0;
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    for (int64_t i = first; i < sq.len; ++i) {
      const int64_t stat = static_cast<int64_t>(h) * a.tokens_q + sq.begin + i;
      const float lse_i = lse[stat];
      if (lse_i == -INFINITY) continue;
      const int64_t row = (sq.begin + i) * a.heads_q + h;
      const T* qi = a.q + row * dim;
      const T* doi = dout + row * dim;
      float s = 0.f, dp = 0.f;
      for (int d = lane; d < dim; d += 32) {
        s += ks[d] * to_f32(qi[d]);
        dp += vs[d] * to_f32(doi[d]);
      }
      const float p = expf(a.scale * warp_sum(s) - lse_i);
      const float ds = p * (warp_sum(dp) - delta[stat]);
      for (int d = lane; d < dim; d += 32) {
        dk_acc[d] += a.scale * ds * to_f32(qi[d]);
        dv_acc[d] += p * to_f32(doi[d]);
      }
    }
  }
  for (int d = lane; d < dim; d += 32) {
    if (dk != nullptr) dk[key * dim + d] = from_f32<T>(dk_acc[d]);
    if (dv != nullptr) dv[key * dim + d] = from_f32<T>(dv_acc[d]);
  }
}

template <class T>
AttnArgs<T> make_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_q, const Tensor& cu_k,
                      int max_q, int max_k, float scale, bool causal) {
  return AttnArgs<T>{ptr<T>(q),          ptr<T>(k),          ptr<T>(v),
                     ptr<int32_t>(cu_q), ptr<int32_t>(cu_k), q.dim(0),
                     k.dim(0),           static_cast<int>(q.dim(1)), static_cast<int>(k.dim(1)),
                     static_cast<int>(q.dim(2)), max_q,      max_k,
                     scale,              causal};
}

// Launch grid over (row tiles of max_len, heads, batch); false when there is nothing to launch.
bool attention_grid(dim3& grid, int max_len, int64_t heads, int64_t batch) {
  VLM_CHECK(heads <= 65535 && batch <= 65535, "ops::attention: ", heads, " heads x ", batch,
            " sequences exceed the CUDA grid of the simple kernels");
  grid = dim3(static_cast<unsigned>(ceil_div(max_len, kWarps)), static_cast<unsigned>(heads),
              static_cast<unsigned>(batch));
  return grid.x > 0 && grid.y > 0 && grid.z > 0;
}

void check_cu_seqlens(const Tensor& cu, int64_t tokens, int max_len, Device dev, cudaStream_t stream) {
  const int batch = static_cast<int>(cu.dim(0) - 1);
  pdl::launch(check_cu_seqlens_kernel, 1, 256, 0, stream, ptr<int32_t>(cu), batch, tokens, max_len,
              index_error_record(dev));
  VLM_CUDA_CHECK_LAUNCH();
}

// Self-attention passes one tensor as both: checked once (a 1-block launch per call adds up over a model's layers).
void check_both_cu_seqlens(const Tensor& cu_q, const Tensor& cu_k, int64_t tokens_q, int64_t tokens_k, int max_q,
                           int max_k, Device dev, cudaStream_t stream) {
  check_cu_seqlens(cu_q, tokens_q, max_q, dev, stream);
  const bool same = cu_k.raw_data() == cu_q.raw_data() && cu_k.dim(0) == cu_q.dim(0) && tokens_k == tokens_q &&
                    max_k == max_q;
  if (!same) check_cu_seqlens(cu_k, tokens_k, max_k, dev, stream);
}

std::atomic<bool> g_deterministic{false};  // set_attention_deterministic
EnvSwitch g_flash("VLM_ATTENTION_FLASH");     // set_attention_flash, until then the environment

// q, k, v and their gradients may be row-strided [T, H, D] (ops::attention_forward): flash reads and writes them in
// place; the simple kernels take contiguous copies (cudaMemcpy2D over the T rows of H x D elements).
// Bytes of one row's H x D elements, and from one row to the next.
size_t row_bytes(const Tensor& t) { return static_cast<size_t>(t.dim(1) * t.dim(2)) * dtype_size(t.dtype()); }
size_t row_pitch(const Tensor& t) { return static_cast<size_t>(t.strides()[0]) * dtype_size(t.dtype()); }

Tensor contiguous_rows(const Tensor& t, cudaStream_t stream) {
  if (!t.defined() || t.is_contiguous() || t.dim(0) == 0) return t;
  Tensor c = scratch(t.shape(), t.dtype(), t.device());
  VLM_CUDA_CHECK(cudaMemcpy2DAsync(c.raw_data(), row_bytes(t), t.raw_data(), row_pitch(t), row_bytes(t),
                                   static_cast<size_t>(t.dim(0)), cudaMemcpyDeviceToDevice, stream));
  return c;
}
// dst (row-strided or contiguous) = src (contiguous, same shape); nothing when they are the same tensor.
void copy_rows_into(const Tensor& dst, const Tensor& src, cudaStream_t stream) {
  if (!dst.defined() || dst.raw_data() == src.raw_data() || dst.dim(0) == 0) return;
  VLM_CUDA_CHECK(cudaMemcpy2DAsync(dst.raw_data(), row_pitch(dst), src.raw_data(), row_bytes(dst), row_bytes(dst),
                                   static_cast<size_t>(dst.dim(0)), cudaMemcpyDeviceToDevice, stream));
}
// A contiguous stand-in for an output that is row-strided (written back with copy_rows_into), else the output itself.
Tensor contiguous_output(const Tensor& t) {
  return !t.defined() || t.is_contiguous() ? t : scratch(t.shape(), t.dtype(), t.device());
}

bool flash_candidate(const Tensor& q, const Tensor& k, int max_k, float scale) {
  const int64_t dim = q.dim(2);
  return g_flash.on() && q.dtype() == DType::bf16 && dim % 8 == 0 && dim <= 256 && k.dim(0) > 0 && max_k > 0 &&
         scale > 0.f;
}

}  // namespace

void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k, int max_seqlen_q, int max_seqlen_k,
                       float scale, bool causal, bool cu_seqlens_checked) {
  const Device dev = out.device();
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_of(dev);
  const int64_t batch = cu_seqlens_q.dim(0) - 1;
  if (batch > 0 && !cu_seqlens_checked)
    check_both_cu_seqlens(cu_seqlens_q, cu_seqlens_k, q.dim(0), k.dim(0), max_seqlen_q, max_seqlen_k, dev, stream);
  check_index_errors_now("attention_forward", dev);
  if (q.dim(0) == 0 || batch == 0) return;
  if (flash_candidate(q, k, max_seqlen_k, scale)) {
    flash::FlashOptions options;
    options.scale = scale;
    options.causal = causal;
    const Status s = flash::flash_attention_forward(out, lse, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                                    max_seqlen_k, options, current_stream(dev));
    if (s.ok()) return;  // otherwise flash declined the problem (checked before launching): use the simple kernel
  }
  const int64_t dim = q.dim(2);
  VLM_CHECK(dim <= kMaxSimpleDim, "ops::attention_forward: head dim ", dim, " exceeds the simple kernel's ",
            kMaxSimpleDim);
  dim3 grid;
  if (!attention_grid(grid, max_seqlen_q, q.dim(1), batch)) return;
  const size_t smem = sizeof(float) * kWarps * 2 * static_cast<size_t>(dim);
  const Tensor qc = contiguous_rows(q, stream), kc = contiguous_rows(k, stream), vc = contiguous_rows(v, stream);
  dispatch_float(q.dtype(), "attention_forward", [&](auto tag) {
    using T = decltype(tag);
    const AttnArgs<T> a =
        make_args<T>(qc, kc, vc, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal);
    pdl::launch(attention_forward_kernel<T>, grid, kWarps * 32, smem, stream, a, ptr<T>(out), ptr<float>(lse));
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void check_cu_seqlens(const Tensor& cu_seqlens, int64_t rows, int max_seqlen) {
  const Device dev = cu_seqlens.device();
  DeviceGuard guard(dev);
  if (cu_seqlens.dim(0) > 1) check_cu_seqlens(cu_seqlens, rows, max_seqlen, dev, stream_of(dev));
  check_index_errors_now("check_cu_seqlens", dev);
}

void set_attention_deterministic(bool on) { g_deterministic.store(on); }
bool attention_deterministic() { return g_deterministic.load(); }
void set_attention_flash(bool on) { g_flash.set(on); }
bool attention_flash() { return g_flash.on(); }

void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& cu_seqlens_q,
                        const Tensor& cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, float scale, bool causal,
                        bool cu_seqlens_checked) {
  const Device dev = dout.device();
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_of(dev);
  const int64_t batch = cu_seqlens_q.dim(0) - 1;
  if (batch > 0 && !cu_seqlens_checked)
    check_both_cu_seqlens(cu_seqlens_q, cu_seqlens_k, q.dim(0), k.dim(0), max_seqlen_q, max_seqlen_k, dev, stream);
  check_index_errors_now("attention_backward", dev);
  if (!dq.defined() && !dk.defined() && !dv.defined()) return;
  if (q.dim(0) == 0 || k.dim(0) == 0 || batch == 0) {  // no (query, key) pair: all gradients are zero
    for (Tensor* g : {&dq, &dk, &dv}) {
      if (!g->defined() || g->dim(0) == 0) continue;
      VLM_CUDA_CHECK(cudaMemset2DAsync(g->raw_data(), row_pitch(*g), 0, row_bytes(*g), static_cast<size_t>(g->dim(0)),
                                       stream));
    }
    return;
  }
  if (flash_candidate(q, k, max_seqlen_k, scale)) {
    // Flash writes all three: stand-ins for the gradients the caller does not need.
    Tensor dq_t = dq.defined() ? dq : scratch(q.shape(), q.dtype(), dev);
    Tensor dk_t = dk.defined() ? dk : scratch(k.shape(), k.dtype(), dev);
    Tensor dv_t = dv.defined() ? dv : scratch(k.shape(), k.dtype(), dev);
    flash::FlashOptions options;
    options.scale = scale;
    options.causal = causal;
    options.deterministic = g_deterministic.load();
    const Status s = flash::flash_attention_backward(dq_t, dk_t, dv_t, dout, q, k, v, out, lse, cu_seqlens_q,
                                                     cu_seqlens_k, max_seqlen_q, max_seqlen_k, options,
                                                     current_stream(dev));
    if (s.ok()) return;
  }
  const int64_t dim = q.dim(2);
  VLM_CHECK(dim <= kMaxSimpleDim, "ops::attention_backward: head dim ", dim, " exceeds the simple kernel's ",
            kMaxSimpleDim);
  Tensor delta = scratch(Shape{q.dim(1), q.dim(0)}, DType::f32, dev);
  const Tensor qc = contiguous_rows(q, stream), kc = contiguous_rows(k, stream), vc = contiguous_rows(v, stream);
  const Tensor dqc = contiguous_output(dq), dkc = contiguous_output(dk), dvc = contiguous_output(dv);
  dispatch_float(q.dtype(), "attention_backward", [&](auto tag) {
    using T = decltype(tag);
    const AttnArgs<T> a =
        make_args<T>(qc, kc, vc, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal);
    const dim3 delta_grid(static_cast<unsigned>(ceil_div(q.dim(0), kWarps)), static_cast<unsigned>(q.dim(1)));
    pdl::launch(attention_delta_kernel<T>, delta_grid, kWarps * 32, 0, stream, ptr<float>(delta), ptr<T>(dout),
                ptr<T>(out), q.dim(0), a.heads_q, a.dim);
    VLM_CUDA_CHECK_LAUNCH();
    dim3 grid;
    if (dq.defined() && attention_grid(grid, max_seqlen_q, q.dim(1), batch)) {
      pdl::launch(attention_dq_kernel<T>, grid, kWarps * 32, sizeof(float) * kWarps * 3 * dim, stream, a, ptr<T>(dqc),
                  ptr<T>(dout), ptr<float>(lse), ptr<float>(delta));
      VLM_CUDA_CHECK_LAUNCH();
    }
    if ((dk.defined() || dv.defined()) && attention_grid(grid, max_seqlen_k, k.dim(1), batch)) {
      pdl::launch(attention_dkdv_kernel<T>, grid, kWarps * 32, sizeof(float) * kWarps * 4 * dim, stream, a,
                  ptr_or_null<T>(dkc), ptr_or_null<T>(dvc), ptr<T>(dout), ptr<float>(lse), ptr<float>(delta));
      VLM_CUDA_CHECK_LAUNCH();
    }
  });
  copy_rows_into(dq, dqc, stream);
  copy_rows_into(dk, dkc, stream);
  copy_rows_into(dv, dvc, stream);
}

}  // namespace vlm::ops::cuda
