// Parameter checks and the Tensor-level wrappers of flash_api.h (host code; the launches are in flash_dispatch.cu).
#include "kernels/cuda/flash/flash_api.h"

#include <cmath>
#include <initializer_list>

#include "kernels/cuda/flash/flash_dispatch.h"

namespace vlm::flash {

namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
bool stride_ok(int64_t s) { return s >= 0 && s % 8 == 0; }

Status check_common(int batch, int hq, int hkv, int d, int max_q, int max_k, float scale, FlashDType dtype,
                    const int32_t* cu_q, const int32_t* cu_k) {
  if (batch < 0 || max_q < 0 || max_k < 0) return invalid_argument("flash: negative batch or max_seqlen");
  if (hq <= 0 || hkv <= 0 || hq % hkv != 0)
    return invalid_argument(str("flash: n_heads_q (", hq, ") must be a positive multiple of n_heads_kv (", hkv, ")"));
  if (!flash_portable_supports(d, dtype))
    return unsupported(str("flash: head_dim ", d, " is not compiled for this dtype (multiples of 8 up to 256)"));
  if (!(scale > 0.f) || !std::isfinite(scale)) return invalid_argument(str("flash: scale must be > 0, got ", scale));
  if (batch > 0 && (!cu_q || !cu_k)) return invalid_argument("flash: cu_seqlens_q/k are required");
  return Status();
}

}  // namespace

Status flash_fwd_check(const FlashFwdParams& p) {
  VLM_RETURN_IF_ERROR(check_common(p.batch, p.n_heads_q, p.n_heads_kv, p.head_dim, p.max_seqlen_q, p.max_seqlen_k,
                                   p.scale, p.dtype, p.cu_seqlens_q, p.cu_seqlens_k));
  if (!p.q || !p.k || !p.v || !p.out || !p.lse) return invalid_argument("flash_fwd: null q, k, v, out or lse");
  if (!aligned16(p.q) || !aligned16(p.k) || !aligned16(p.v) || !aligned16(p.out))
    return invalid_argument("flash_fwd: q, k, v and out must be 16-byte aligned");
  for (int64_t s : {p.q_row_stride, p.q_head_stride, p.k_row_stride, p.k_head_stride, p.v_row_stride, p.v_head_stride,
                    p.out_row_stride, p.out_head_stride})
    if (!stride_ok(s)) return invalid_argument("flash_fwd: row and head strides must be multiples of 8 elements");
  if (p.lse_head_stride < 0) return invalid_argument("flash_fwd: negative lse_head_stride");
  return Status();
}

Status flash_bwd_check(const FlashBwdParams& p) {
  VLM_RETURN_IF_ERROR(check_common(p.batch, p.n_heads_q, p.n_heads_kv, p.head_dim, p.max_seqlen_q, p.max_seqlen_k,
                                   p.scale, p.dtype, p.cu_seqlens_q, p.cu_seqlens_k));
  if (!p.q || !p.k || !p.v || !p.out || !p.dout || !p.lse || !p.dq || !p.dk || !p.dv)
    return invalid_argument("flash_bwd: a required pointer is null");
  for (const void* ptr : std::initializer_list<const void*>{p.q, p.k, p.v, p.out, p.dout, p.dq, p.dk, p.dv})
    if (!aligned16(ptr)) return invalid_argument("flash_bwd: tensors must be 16-byte aligned");
  for (int64_t s : {p.q_row_stride, p.q_head_stride, p.k_row_stride, p.k_head_stride, p.v_row_stride, p.v_head_stride,
                    p.out_row_stride, p.out_head_stride, p.dout_row_stride, p.dout_head_stride, p.dq_row_stride,
                    p.dq_head_stride, p.dk_row_stride, p.dk_head_stride, p.dv_row_stride, p.dv_head_stride})
    if (!stride_ok(s)) return invalid_argument("flash_bwd: row and head strides must be multiples of 8 elements");
  if (p.total_q < 0 || p.lse_head_stride < 0) return invalid_argument("flash_bwd: negative total_q or lse stride");
  if (reinterpret_cast<uintptr_t>(p.workspace) % 256 != 0)
    return invalid_argument("flash_bwd: workspace must be 256-byte aligned");
  return Status();
}

// ---- Tensor wrappers ---------------------------------------------------------------------------------------------

namespace {

Expected<FlashDType> element_type(const Tensor& t, const char* name) {
  if (t.dtype() == DType::bf16) return FlashDType::bf16;
  if (t.dtype() == DType::f16) return FlashDType::f16;
  return invalid_argument(str("flash: ", name, " must be bf16 or f16, got ", dtype_name(t.dtype())));
}

// A [T, H, D] tensor on `device` with `dtype`, contiguous last dim.
Status check_thd(const Tensor& t, const char* name, Device device, DType dtype, int64_t rows, int64_t heads,
                 int64_t dim) {
  if (!t.defined()) return invalid_argument(str("flash: ", name, " is undefined"));
  if (t.device() != device) return invalid_argument(str("flash: ", name, " is on ", t.device().to_string()));
  if (t.dtype() != dtype) return invalid_argument(str("flash: ", name, " is ", dtype_name(t.dtype())));
  if (t.ndim() != 3 || (rows >= 0 && t.dim(0) != rows) || t.dim(1) != heads || t.dim(2) != dim)
    return invalid_argument(str("flash: ", name, " has shape ", t.shape().to_string(), ", expected [",
                                rows >= 0 ? std::to_string(rows) : std::string("T"), ", ", heads, ", ", dim, "]"));
  if (t.strides()[2] != 1) return invalid_argument(str("flash: ", name, " must have a contiguous last dim"));
  return Status();
}

Status check_cu(const Tensor& cu, const char* name, Device device, int64_t batch) {
  if (!cu.defined() || cu.device() != device || cu.dtype() != DType::i32 || cu.ndim() != 1 || !cu.is_contiguous())
    return invalid_argument(str("flash: ", name, " must be a contiguous i32 [B + 1] tensor on ", device.to_string()));
  if (batch >= 0 && cu.dim(0) != batch + 1) return invalid_argument(str("flash: cu_seqlens_q/k sizes differ"));
  if (cu.dim(0) < 1) return invalid_argument(str("flash: ", name, " needs at least one entry"));
  return Status();
}

float default_scale(float scale, int64_t d) { return scale > 0.f ? scale : 1.f / std::sqrt(static_cast<float>(d)); }

}  // namespace

Status flash_attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k, int max_seqlen_q,
                               int max_seqlen_k, const FlashOptions& options, StreamHandle stream) {
  if (!q.defined() || q.ndim() != 3) return invalid_argument("flash: q must be [Tq, Hq, D]");
  if (!q.device().is_cuda()) return invalid_argument("flash: q must be on a CUDA device");
  VLM_ASSIGN_OR_RETURN(FlashDType et, element_type(q, "q"));
  const Device dev = q.device();
  const int64_t tq = q.dim(0), hq = q.dim(1), d = q.dim(2);
  if (!k.defined() || k.ndim() != 3) return invalid_argument("flash: k must be [Tk, Hkv, D]");
  const int64_t tk = k.dim(0), hkv = k.dim(1);
  VLM_RETURN_IF_ERROR(check_thd(q, "q", dev, q.dtype(), tq, hq, d));
  VLM_RETURN_IF_ERROR(check_thd(k, "k", dev, q.dtype(), tk, hkv, d));
  VLM_RETURN_IF_ERROR(check_thd(v, "v", dev, q.dtype(), tk, hkv, d));
  VLM_RETURN_IF_ERROR(check_thd(out, "out", dev, q.dtype(), tq, hq, d));
  if (!lse.defined() || lse.device() != dev || lse.dtype() != DType::f32 || lse.ndim() != 2 || lse.dim(0) != hq ||
      lse.dim(1) != tq || lse.strides()[1] != 1)
    return invalid_argument(str("flash: lse must be f32 [", hq, ", ", tq, "] on ", dev.to_string()));
  VLM_RETURN_IF_ERROR(check_cu(cu_seqlens_q, "cu_seqlens_q", dev, -1));
  VLM_RETURN_IF_ERROR(check_cu(cu_seqlens_k, "cu_seqlens_k", dev, cu_seqlens_q.dim(0) - 1));

  FlashFwdParams p;
  p.q = q.raw_data();
  p.k = k.raw_data();
  p.v = v.raw_data();
  p.out = out.raw_data();
  p.lse = lse.data<float>();
  p.cu_seqlens_q = cu_seqlens_q.data<int32_t>();
  p.cu_seqlens_k = cu_seqlens_k.data<int32_t>();
  p.q_row_stride = q.strides()[0];
  p.q_head_stride = q.strides()[1];
  p.k_row_stride = k.strides()[0];
  p.k_head_stride = k.strides()[1];
  p.v_row_stride = v.strides()[0];
  p.v_head_stride = v.strides()[1];
  p.out_row_stride = out.strides()[0];
  p.out_head_stride = out.strides()[1];
  p.lse_head_stride = lse.strides()[0];
  p.batch = static_cast<int>(cu_seqlens_q.dim(0) - 1);
  p.n_heads_q = static_cast<int>(hq);
  p.n_heads_kv = static_cast<int>(hkv);
  p.head_dim = static_cast<int>(d);
  p.max_seqlen_q = max_seqlen_q;
  p.max_seqlen_k = max_seqlen_k;
  p.total_q = static_cast<int>(tq);
  p.total_k = static_cast<int>(tk);
  p.scale = default_scale(options.scale, d);
  p.causal = options.causal;
  p.dtype = et;
  p.path = options.path;
  return flash_fwd(p, stream);
}

Status flash_attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                                const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                                const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k, int max_seqlen_q,
                                int max_seqlen_k, const FlashOptions& options, StreamHandle stream) {
  if (!q.defined() || q.ndim() != 3) return invalid_argument("flash: q must be [Tq, Hq, D]");
  if (!q.device().is_cuda()) return invalid_argument("flash: q must be on a CUDA device");
  VLM_ASSIGN_OR_RETURN(FlashDType et, element_type(q, "q"));
  const Device dev = q.device();
  const int64_t tq = q.dim(0), hq = q.dim(1), d = q.dim(2);
  if (!k.defined() || k.ndim() != 3) return invalid_argument("flash: k must be [Tk, Hkv, D]");
  const int64_t tk = k.dim(0), hkv = k.dim(1);
  VLM_RETURN_IF_ERROR(check_thd(q, "q", dev, q.dtype(), tq, hq, d));
  VLM_RETURN_IF_ERROR(check_thd(k, "k", dev, q.dtype(), tk, hkv, d));
  VLM_RETURN_IF_ERROR(check_thd(v, "v", dev, q.dtype(), tk, hkv, d));
  VLM_RETURN_IF_ERROR(check_thd(out, "out", dev, q.dtype(), tq, hq, d));
  VLM_RETURN_IF_ERROR(check_thd(dout, "dout", dev, q.dtype(), tq, hq, d));
  VLM_RETURN_IF_ERROR(check_thd(dq, "dq", dev, q.dtype(), tq, hq, d));
  VLM_RETURN_IF_ERROR(check_thd(dk, "dk", dev, q.dtype(), tk, hkv, d));
  VLM_RETURN_IF_ERROR(check_thd(dv, "dv", dev, q.dtype(), tk, hkv, d));
  if (!lse.defined() || lse.device() != dev || lse.dtype() != DType::f32 || lse.ndim() != 2 || lse.dim(0) != hq ||
      lse.dim(1) != tq || lse.strides()[1] != 1)
    return invalid_argument(str("flash: lse must be f32 [", hq, ", ", tq, "] on ", dev.to_string()));
  VLM_RETURN_IF_ERROR(check_cu(cu_seqlens_q, "cu_seqlens_q", dev, -1));
  VLM_RETURN_IF_ERROR(check_cu(cu_seqlens_k, "cu_seqlens_k", dev, cu_seqlens_q.dim(0) - 1));

  FlashBwdParams p;
  p.q = q.raw_data();
  p.k = k.raw_data();
  p.v = v.raw_data();
  p.out = out.raw_data();
  p.dout = dout.raw_data();
  p.lse = lse.data<float>();
  p.dq = dq.raw_data();
  p.dk = dk.raw_data();
  p.dv = dv.raw_data();
  p.cu_seqlens_q = cu_seqlens_q.data<int32_t>();
  p.cu_seqlens_k = cu_seqlens_k.data<int32_t>();
  p.q_row_stride = q.strides()[0];
  p.q_head_stride = q.strides()[1];
  p.k_row_stride = k.strides()[0];
  p.k_head_stride = k.strides()[1];
  p.v_row_stride = v.strides()[0];
  p.v_head_stride = v.strides()[1];
  p.out_row_stride = out.strides()[0];
  p.out_head_stride = out.strides()[1];
  p.dout_row_stride = dout.strides()[0];
  p.dout_head_stride = dout.strides()[1];
  p.dq_row_stride = dq.strides()[0];
  p.dq_head_stride = dq.strides()[1];
  p.dk_row_stride = dk.strides()[0];
  p.dk_head_stride = dk.strides()[1];
  p.dv_row_stride = dv.strides()[0];
  p.dv_head_stride = dv.strides()[1];
  p.lse_head_stride = lse.strides()[0];
  p.batch = static_cast<int>(cu_seqlens_q.dim(0) - 1);
  p.n_heads_q = static_cast<int>(hq);
  p.n_heads_kv = static_cast<int>(hkv);
  p.head_dim = static_cast<int>(d);
  p.max_seqlen_q = max_seqlen_q;
  p.max_seqlen_k = max_seqlen_k;
  p.total_q = static_cast<int>(tq);
  p.total_k = static_cast<int>(tk);
  p.scale = default_scale(options.scale, d);
  p.causal = options.causal;
  p.deterministic = options.deterministic;
  p.dtype = et;
  p.path = options.path;
  return flash_bwd(p, stream);
}

}  // namespace vlm::flash
