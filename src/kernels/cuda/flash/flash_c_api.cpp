// The C ABI of flash_c_api.h over flash_fwd / flash_bwd: fills the parameter structs for dense contiguous batches and
// turns a Status into a return code plus a per-thread message.
#include "kernels/cuda/flash/flash_c_api.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/cuda/flash/flash_api.h"

namespace {

thread_local std::string g_last_error;

int fail(const std::string& message) {
  g_last_error = message;
  return 1;
}

// Checks what the structs cannot: a null shape, non-positive sizes and row counts past int32 (flash_*_check validates
// the rest: head dims, head ratio, scale, pointers).
const char* shape_error(const VlmFlashDense* s) {
  if (s == nullptr) return "vlm_flash: shape is null";
  if (s->batch <= 0 || s->seqlen_q <= 0 || s->seqlen_k <= 0 || s->heads_q <= 0 || s->heads_kv <= 0 ||
      s->head_dim <= 0)
    return "vlm_flash: batch, seqlens, heads and head_dim must be positive";
  if (static_cast<int64_t>(s->batch) * s->seqlen_q > INT32_MAX ||
      static_cast<int64_t>(s->batch) * s->seqlen_k > INT32_MAX)
    return "vlm_flash: batch * seqlen exceeds the kernels' int32 row range";
  return nullptr;
}

float scale_of(const VlmFlashDense* s) {
  return s->scale > 0.f ? s->scale : 1.f / std::sqrt(static_cast<float>(s->head_dim));
}

// The fields the forward and backward parameters share, for contiguous [rows, heads, head_dim] tensors.
template <typename Params>
void fill_common(Params& p, const VlmFlashDense* s) {
  p.cu_seqlens_q = s->cu_seqlens_q;
  p.cu_seqlens_k = s->cu_seqlens_k;
  p.q_row_stride = p.out_row_stride = static_cast<int64_t>(s->heads_q) * s->head_dim;
  p.k_row_stride = p.v_row_stride = static_cast<int64_t>(s->heads_kv) * s->head_dim;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.out_head_stride = s->head_dim;
  p.lse_head_stride = static_cast<int64_t>(s->batch) * s->seqlen_q;
  p.batch = s->batch;
  p.n_heads_q = s->heads_q;
  p.n_heads_kv = s->heads_kv;
  p.head_dim = s->head_dim;
  p.max_seqlen_q = s->seqlen_q;
  p.max_seqlen_k = s->seqlen_k;
  p.total_q = s->batch * s->seqlen_q;
  p.total_k = s->batch * s->seqlen_k;
  p.scale = scale_of(s);
  p.causal = s->causal != 0;
  p.dtype = vlm::flash::FlashDType::bf16;
}

vlm::flash::FlashBwdParams bwd_params(const VlmFlashDense* s) {
  vlm::flash::FlashBwdParams p;
  fill_common(p, s);
  p.dout_row_stride = p.dq_row_stride = p.q_row_stride;
  p.dk_row_stride = p.dv_row_stride = p.k_row_stride;
  p.dout_head_stride = p.dq_head_stride = p.dk_head_stride = p.dv_head_stride = s->head_dim;
  return p;
}

}  // namespace

extern "C" {

int vlm_flash_fwd_dense(const VlmFlashDense* shape, const void* q, const void* k, const void* v, void* out, float* lse,
                        void* stream) {
  if (const char* e = shape_error(shape)) return fail(e);
  vlm::flash::FlashFwdParams p;
  fill_common(p, shape);
  p.q = q;
  p.k = k;
  p.v = v;
  p.out = out;
  p.lse = lse;
  const vlm::Status st = vlm::flash::flash_fwd(p, stream);
  return st.ok() ? 0 : fail(st.message());
}

size_t vlm_flash_bwd_workspace_bytes(const VlmFlashDense* shape) {
  if (shape_error(shape) != nullptr) return 0;
  return vlm::flash::flash_bwd_workspace_bytes(bwd_params(shape));
}

int vlm_flash_bwd_dense(const VlmFlashDense* shape, const void* q, const void* k, const void* v, const void* out,
                        const void* dout, const float* lse, void* dq, void* dk, void* dv, void* workspace,
                        size_t workspace_bytes, void* stream) {
  if (const char* e = shape_error(shape)) return fail(e);
  vlm::flash::FlashBwdParams p = bwd_params(shape);
  const size_t need = vlm::flash::flash_bwd_workspace_bytes(p);
  if (workspace != nullptr && workspace_bytes < need)
    return fail("vlm_flash: workspace of " + std::to_string(workspace_bytes) + " bytes, the backward needs " +
                std::to_string(need));
  p.q = q;
  p.k = k;
  p.v = v;
  p.out = out;
  p.dout = dout;
  p.lse = lse;
  p.dq = dq;
  p.dk = dk;
  p.dv = dv;
  p.workspace = workspace;
  const vlm::Status st = vlm::flash::flash_bwd(p, stream);
  return st.ok() ? 0 : fail(st.message());
}

const char* vlm_flash_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
