// C ABI of our FlashAttention kernels for callers outside C++ (Python's ctypes, a PyTorch extension): dense batches of
// equal-length sequences on raw device pointers, the layout PyTorch's (batch, seqlen, heads, head_dim) tensors have
// when contiguous. Built as the shared library libvlm_flash_c.so (CUDA builds only; python/vlm_flash.py binds it).
//   q, out, dout, dq     [batch * seqlen_q, heads_q, head_dim]   bf16, contiguous
//   k, v, dk, dv         [batch * seqlen_k, heads_kv, head_dim]  bf16, contiguous
//   lse                  [heads_q, batch * seqlen_q]             f32 (natural log), written by the forward
//   cu_seqlens_q/k       int32 [batch + 1] on the device: 0, seqlen, 2 seqlen, ... (the caller's, reused per call)
// heads_kv divides heads_q (grouped-query). causal: bottom-right aligned; scale <= 0 means 1/sqrt(head_dim). stream: a
// cudaStream_t (null: the default stream). Every function returns 0 on success; otherwise nonzero, and
// vlm_flash_last_error() says why (this thread's last error).
#pragma once

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define VLM_FLASH_C_EXPORT __attribute__((visibility("default")))
#else
#define VLM_FLASH_C_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct VlmFlashDense {
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  int causal;
  float scale;
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
} VlmFlashDense;

VLM_FLASH_C_EXPORT int vlm_flash_fwd_dense(const VlmFlashDense* shape, const void* q, const void* k, const void* v,
                                           void* out, float* lse, void* stream);
// The backward's scratch bytes for this shape (0 for an invalid shape); pass at least as many in `workspace`, or a
// null workspace to let the library allocate from its own caching allocator.
VLM_FLASH_C_EXPORT size_t vlm_flash_bwd_workspace_bytes(const VlmFlashDense* shape);
// dq, dk, dv overwritten; out and lse are the forward's.
VLM_FLASH_C_EXPORT int vlm_flash_bwd_dense(const VlmFlashDense* shape, const void* q, const void* k, const void* v,
                                           const void* out, const void* dout, const float* lse, void* dq, void* dk,
                                           void* dv, void* workspace, size_t workspace_bytes, void* stream);
VLM_FLASH_C_EXPORT const char* vlm_flash_last_error(void);

#ifdef __cplusplus
}
#endif
