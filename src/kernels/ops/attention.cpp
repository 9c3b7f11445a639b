// The attention family's op boundary: variable-length grouped-query attention forward and backward, and the
// cu_seqlens check alone. Each op validates, then dispatches to cuda/attention.cu (FlashAttention from cuda/flash
// where it applies) or the CPU reference in cpu/attention.cpp.
#include "kernels/ops.h"

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops/check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops/check.h

namespace {
void check_rows_like(const char* op, const char* name, const Tensor& t, DType dt, Device dev, const Shape& shape) {
  check_rows(op, name, t, dt, dev);
  check_shape(op, name, t, shape);
}

// Validates the inputs shared by forward and backward (q, k, v in the compute dtype `dt`) and fills the params.
cpu::AttentionParams check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& cu_q, const Tensor& cu_k, int max_seqlen_q, int max_seqlen_k,
                                     float scale, bool causal, DType dt, Device dev) {
  check_rows(op, "q", q, dt, dev);
  check_rows(op, "k", k, dt, dev);
  check_ndim(op, "q", q, 3);
  check_ndim(op, "k", k, 3);
  check_rows_like(op, "v", v, dt, dev, k.shape());
  const int64_t heads_q = q.dim(1), heads_kv = k.dim(1), dim = q.dim(2);
  VLM_CHECK(k.dim(2) == dim && dim > 0, "ops::", op, ": q is ", q.describe(), ", k is ", k.describe(),
            " (head dims must match and be > 0)");
  VLM_CHECK(heads_kv > 0 && heads_q % heads_kv == 0, "ops::", op, ": q is ", q.describe(), ", k is ", k.describe(),
            " (q heads must be a multiple of kv heads)");
  check_tensor(op, "cu_seqlens_q", cu_q, DType::i32, dev);
  check_tensor(op, "cu_seqlens_k", cu_k, DType::i32, dev);
  check_ndim(op, "cu_seqlens_q", cu_q, 1);
  VLM_CHECK(cu_q.dim(0) >= 1, "ops::", op, ": cu_seqlens_q is ", cu_q.describe(), ", expected [B + 1]");
  check_shape(op, "cu_seqlens_k", cu_k, cu_q.shape());
  VLM_CHECK(max_seqlen_q >= 0 && max_seqlen_k >= 0, "ops::", op, ": negative max_seqlen (", max_seqlen_q, ", ",
            max_seqlen_k, ")");
  cpu::AttentionParams p;
  p.batch = cu_q.dim(0) - 1;
  p.tokens_q = q.dim(0);
  p.tokens_k = k.dim(0);
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim = dim;
  p.max_seqlen_q = max_seqlen_q;
  p.max_seqlen_k = max_seqlen_k;
  p.scale = scale;
  p.causal = causal;
  if (dev.is_cpu()) {  // host pointers only; the cu_seqlens values are checked by the CPU op (on CUDA, on device)
    p.q = q.data<float>();
    p.k = k.data<float>();
    p.v = v.data<float>();
    p.cu_seqlens_q = cu_q.data<int32_t>();
    p.cu_seqlens_k = cu_k.data<int32_t>();
  }
  return p;
}
}  // namespace

void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k, int max_seqlen_q, int max_seqlen_k,
                       float scale, bool causal, bool cu_seqlens_checked) {
  const char* op = "attention_forward";
  const Device dev = out.device();
  const DType dt = compute_dtype(op, "q", q);
  const cpu::AttentionParams p = check_attention(op, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                 scale, causal, dt, dev);
  check_like(op, "out", out, dt, dev, q.shape());
  check_like(op, "lse", lse, DType::f32, dev, Shape{p.heads_q, p.tokens_q});
  VLM_PROFILE_TAG(p.tokens_q, " h", p.heads_q, "/", p.heads_kv, " d", p.head_dim, " s", max_seqlen_q);
  VLM_DISPATCH_CUDA(dev, op,
                    cuda::attention_forward(out, lse, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                            scale, causal, cu_seqlens_checked));
  cpu::attention_forward(out.data<float>(), lse.data<float>(), p);
}

void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& cu_seqlens_q,
                        const Tensor& cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, float scale, bool causal,
                        bool cu_seqlens_checked) {
  const char* op = "attention_backward";
  const Device dev = dout.device();
  const DType dt = compute_dtype(op, "dout", dout);
  const cpu::AttentionParams p = check_attention(op, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                 scale, causal, dt, dev);
  check_like(op, "dout", dout, dt, dev, q.shape());
  check_like(op, "out", out, dt, dev, q.shape());
  check_like(op, "lse", lse, DType::f32, dev, Shape{p.heads_q, p.tokens_q});
  if (dq.defined()) check_rows_like(op, "dq", dq, dt, dev, q.shape());
  if (dk.defined()) check_rows_like(op, "dk", dk, dt, dev, k.shape());
  if (dv.defined()) check_rows_like(op, "dv", dv, dt, dev, k.shape());
  VLM_PROFILE_TAG(p.tokens_q, " h", p.heads_q, "/", p.heads_kv, " d", p.head_dim, " s", max_seqlen_q);
  VLM_DISPATCH_CUDA(dev, op,
                    cuda::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k,
                                             max_seqlen_q, max_seqlen_k, scale, causal, cu_seqlens_checked));
  cpu::attention_backward(f32_or_null(dq), f32_or_null(dk), f32_or_null(dv), dout.data<float>(), out.data<float>(),
                          lse.data<float>(), p);
}

void check_cu_seqlens(const Tensor& cu_seqlens, int64_t rows, int max_seqlen) {
  const char* op = "check_cu_seqlens";
  const Device dev = cu_seqlens.device();
  check_tensor(op, "cu_seqlens", cu_seqlens, DType::i32, dev);
  check_ndim(op, "cu_seqlens", cu_seqlens, 1);
  VLM_CHECK(cu_seqlens.dim(0) >= 1, "ops::", op, ": cu_seqlens is ", cu_seqlens.describe(), ", expected [B + 1]");
  VLM_CHECK(rows >= 0 && max_seqlen >= 0, "ops::", op, ": negative rows (", rows, ") or max_seqlen (", max_seqlen, ")");
  VLM_DISPATCH_CUDA(dev, op, cuda::check_cu_seqlens(cu_seqlens, rows, max_seqlen));
  cpu::check_cu_seqlens(op, "cu_seqlens", cu_seqlens.data<int32_t>(), cu_seqlens.dim(0) - 1, rows, max_seqlen);
}

}  // namespace vlm::ops
