// The paged_attention family's op boundary: writing K/V rows into the paged cache (alone, or straight from the packed
// QKV projection with the split and RoPE) and attention of packed queries over it (decode and chunked prefill). Each
// op validates shapes, dtypes and devices, then dispatches to cuda/paged_attention.cu (the fused split + write: to
// cuda/packed.cu) or the CPU reference in cpu/paged_attention.cpp and cpu/packed.cpp (which check the index tables'
// values).
#include <cmath>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"
#include "kernels/ops/check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops/check.h

namespace {

// k_cache and v_cache: [num_blocks, block_size, Hkv, D] of the compute dtype on `dev`, one shape, block_size > 0.
void check_caches(const char* op, const Tensor& k_cache, const Tensor& v_cache, DType dt, Device dev) {
  check_tensor(op, "k_cache", k_cache, dt, dev);
  check_ndim(op, "k_cache", k_cache, 4);
  check_like(op, "v_cache", v_cache, dt, dev, k_cache.shape());
  VLM_CHECK(k_cache.dim(1) > 0 && k_cache.dim(2) > 0 && k_cache.dim(3) > 0, "ops::", op, ": k_cache is ",
            k_cache.describe(), ", expected [num_blocks, block_size > 0, Hkv > 0, D > 0]");
}

// The checks qkv_split_paged_write and rmsnorm_qkv_paged_write share: q [T, Hq, D] and the caches of one dtype and
// device, an even head dim, theta, positions and slot_mapping for T rows, q disjoint from the caches.
void check_split_paged_write(const char* op, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                             const Tensor& positions, const Tensor& slot_mapping, float theta, DType dt) {
  const Device dev = q.device();
  check_tensor(op, "q", q, dt, dev);
  check_ndim(op, "q", q, 3);
  check_caches(op, k_cache, v_cache, dt, dev);
  const int64_t tokens = q.dim(0), dim = q.dim(2);
  VLM_CHECK(k_cache.dim(3) == dim, "ops::", op, ": q is ", q.describe(), ", k_cache is ", k_cache.describe(),
            " (head dims must match)");
  VLM_CHECK(dim % 2 == 0, "ops::", op, ": q is ", q.describe(), ", head dim must be even");
  VLM_CHECK(std::isfinite(theta) && theta >= 0.f, "ops::", op, ": theta is ", theta,
            ", expected > 0 (RoPE) or 0 (no rotation)");
  if (theta > 0.f || positions.defined()) check_i32_vector(op, "positions", positions, dev, tokens);
  check_i32_vector(op, "slot_mapping", slot_mapping, dev, tokens);
  check_disjoint(op, "q", q, "k_cache", k_cache);
  check_disjoint(op, "q", q, "v_cache", v_cache);
  check_disjoint(op, "k_cache", k_cache, "v_cache", v_cache);
}

}  // namespace

void paged_kv_write(Tensor& k_cache, Tensor& v_cache, const Tensor& k, const Tensor& v, const Tensor& slot_mapping) {
  const char* op = "paged_kv_write";
  const Device dev = k_cache.device();
  const DType dt = compute_dtype(op, "k", k);
  check_caches(op, k_cache, v_cache, dt, dev);
  check_rows(op, "k", k, dt, dev);
  check_ndim(op, "k", k, 3);
  VLM_CHECK(k.dim(1) == k_cache.dim(2) && k.dim(2) == k_cache.dim(3), "ops::", op, ": k is ", k.describe(),
            ", k_cache is ", k_cache.describe(), " (expected k [T, Hkv, D] with the cache's Hkv and D)");
  check_rows(op, "v", v, dt, dev);
  check_shape(op, "v", v, k.shape());
  check_i32_vector(op, "slot_mapping", slot_mapping, dev, k.dim(0));
  VLM_PROFILE_TAG(k.dim(0), " h", k.dim(1), " d", k.dim(2));
  VLM_DISPATCH_CUDA(dev, op, cuda::paged_kv_write(k_cache, v_cache, k, v, slot_mapping));
  const int64_t row = k.dim(1) * k.dim(2);
  cpu::paged_kv_write(k_cache.data<float>(), v_cache.data<float>(), k.data<float>(), v.data<float>(),
                      slot_mapping.data<int32_t>(), k.dim(0), k_cache.dim(0) * k_cache.dim(1), row);
}

void qkv_split_paged_write(Tensor& q, Tensor& k_cache, Tensor& v_cache, const Tensor& qkv, const Tensor& positions,
                           const Tensor& slot_mapping, float theta) {
  const char* op = "qkv_split_paged_write";
  const Device dev = q.device();
  const DType dt = compute_dtype(op, "q", q);
  check_split_paged_write(op, q, k_cache, v_cache, positions, slot_mapping, theta, dt);
  const int64_t tokens = q.dim(0), heads_q = q.dim(1), dim = q.dim(2), heads_kv = k_cache.dim(2);
  check_like(op, "qkv", qkv, dt, dev, Shape{tokens, (heads_q + 2 * heads_kv) * dim});
  check_disjoint(op, "q", q, "qkv", qkv);
  check_disjoint(op, "k_cache", k_cache, "qkv", qkv);
  check_disjoint(op, "v_cache", v_cache, "qkv", qkv);
  VLM_PROFILE_TAG(tokens, "x", heads_q, "+2x", heads_kv, "x", dim);
  VLM_DISPATCH_CUDA(dev, op, cuda::qkv_split_paged_write(q, k_cache, v_cache, qkv, positions, slot_mapping, theta));
  cpu::qkv_split_paged_write(q.data<float>(), k_cache.data<float>(), v_cache.data<float>(), qkv.data<float>(),
                             theta > 0.f ? positions.data<int32_t>() : nullptr, slot_mapping.data<int32_t>(), tokens,
                             k_cache.dim(0) * k_cache.dim(1), heads_q, heads_kv, dim, theta);
}

void rmsnorm_qkv_paged_write(Tensor& q, Tensor& k_cache, Tensor& v_cache, const Tensor& x, const Tensor& norm_w,
                             float eps, const Tensor& w, const Tensor& b, const Tensor& positions,
                             const Tensor& slot_mapping, float theta) {
  const char* op = "rmsnorm_qkv_paged_write";
  const Device dev = q.device();
  const DType dt = check_norm_linear(op, x, norm_w, w, b, dev);
  check_split_paged_write(op, q, k_cache, v_cache, positions, slot_mapping, theta, dt);
  const int64_t tokens = q.dim(0), heads_q = q.dim(1), dim = q.dim(2), heads_kv = k_cache.dim(2);
  VLM_CHECK(x.ndim() == 2 && x.dim(0) == tokens && w.dim(0) == (heads_q + 2 * heads_kv) * dim, "ops::", op,
            ": x is ", x.describe(), ", w is ", w.describe(), ", q is ", q.describe(), ", k_cache is ",
            k_cache.describe(), " (expected x [T, in], w [(Hq + 2 Hkv) D, in])");
  check_disjoint(op, "x", x, "q", q);
  check_disjoint(op, "x", x, "k_cache", k_cache);
  check_disjoint(op, "x", x, "v_cache", v_cache);
  const profile::OpRange range(op, dev);
#ifdef VLM_HAVE_CUDA
  if (dev.is_cuda() &&
      cuda::gemv_qkv_paged_write(q, k_cache, v_cache, x, norm_w, eps, w, b, positions, slot_mapping, theta))
    return;
#endif
  Tensor qkv = temporary(Shape{tokens, w.dim(0)}, dt, dev);
  rmsnorm_linear_forward(qkv, x, norm_w, eps, w, b);
  qkv_split_paged_write(q, k_cache, v_cache, qkv, positions, slot_mapping, theta);
}

void paged_attention(Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const Tensor& block_tables, const Tensor& context_lens, const Tensor& cu_seqlens_q,
                     int max_seqlen_q, int max_context_len, float scale, bool indices_checked) {
  const char* op = "paged_attention";
  const Device dev = out.device();
  const DType dt = compute_dtype(op, "q", q);
  check_rows(op, "q", q, dt, dev);
  check_ndim(op, "q", q, 3);
  check_like(op, "out", out, dt, dev, q.shape());
  check_caches(op, k_cache, v_cache, dt, dev);
  const int64_t heads_q = q.dim(1), heads_kv = k_cache.dim(2), dim = q.dim(2);
  VLM_CHECK(k_cache.dim(3) == dim && dim > 0, "ops::", op, ": q is ", q.describe(), ", k_cache is ",
            k_cache.describe(), " (head dims must match and be > 0)");
  VLM_CHECK(heads_q % heads_kv == 0, "ops::", op, ": q is ", q.describe(), ", k_cache is ", k_cache.describe(),
            " (q heads must be a multiple of kv heads)");
  check_tensor(op, "cu_seqlens_q", cu_seqlens_q, DType::i32, dev);
  check_ndim(op, "cu_seqlens_q", cu_seqlens_q, 1);
  VLM_CHECK(cu_seqlens_q.dim(0) >= 1, "ops::", op, ": cu_seqlens_q is ", cu_seqlens_q.describe(),
            ", expected [B + 1]");
  const int64_t batch = cu_seqlens_q.dim(0) - 1;
  check_i32_vector(op, "context_lens", context_lens, dev, batch);
  check_tensor(op, "block_tables", block_tables, DType::i32, dev);
  check_ndim(op, "block_tables", block_tables, 2);
  VLM_CHECK(block_tables.dim(0) == batch, "ops::", op, ": block_tables is ", block_tables.describe(), ", expected ",
            batch, " rows (one per sequence of cu_seqlens_q)");
  VLM_CHECK(max_seqlen_q >= 0 && max_context_len >= 0, "ops::", op, ": negative max_seqlen_q (", max_seqlen_q,
            ") or max_context_len (", max_context_len, ")");
  VLM_CHECK(std::isfinite(scale), "ops::", op, ": scale is ", scale);
  VLM_PROFILE_TAG(q.dim(0), " b", batch, " h", heads_q, "/", heads_kv, " d", dim, " ctx", max_context_len);
  VLM_DISPATCH_CUDA(dev, op,
                    cuda::paged_attention(out, q, k_cache, v_cache, block_tables, context_lens, cu_seqlens_q,
                                          max_seqlen_q, max_context_len, scale, indices_checked));
  cpu::PagedAttentionParams p;
  p.q = q.data<float>();
  p.k_cache = k_cache.data<float>();
  p.v_cache = v_cache.data<float>();
  p.block_tables = block_tables.data<int32_t>();
  p.context_lens = context_lens.data<int32_t>();
  p.cu_seqlens_q = cu_seqlens_q.data<int32_t>();
  p.batch = batch;
  p.tokens_q = q.dim(0);
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim = dim;
  p.num_blocks = k_cache.dim(0);
  p.block_size = k_cache.dim(1);
  p.max_blocks_per_seq = block_tables.dim(1);
  p.max_seqlen_q = max_seqlen_q;
  p.max_context_len = max_context_len;
  p.scale = scale;
  cpu::paged_attention(out.data<float>(), p);
}

}  // namespace vlm::ops
