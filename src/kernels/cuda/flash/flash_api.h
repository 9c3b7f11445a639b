// Public interface of our FlashAttention kernels: a POD parameter struct per direction, flash_fwd / flash_bwd on
// raw device pointers, and Tensor-level wrappers that validate shapes, dtypes and strides before launching.
//
// Layout (matches ops.h attention_forward / attention_backward):
//   q [Tq, Hq, D], k, v [Tk, Hkv, D] (bf16 or f16; the last dim contiguous, row and head strides free);
//   cu_seqlens_q/k i32 [B + 1] on the device (sequence b is rows [cu[b], cu[b+1]));
//   out [Tq, Hq, D]; lse [Hq, Tq] f32, natural log of the sum of exp(scale * q.k) over visible keys.
// Causal masks are bottom-right aligned: with Lq queries and Lk keys, query i sees keys j <= i + Lk - Lq.
// A query row that sees no key gets out = 0 and lse = -inf. Hq % Hkv == 0: q head h reads kv head h / (Hq / Hkv).
// Backward: dq, dk, dv are overwritten; dk/dv sum over the q heads that share a kv head.
// Head dims: any multiple of 8 up to 256 (kernels are compiled for 64, 96, 128, 256; smaller dims run on the next
// size up with zero padding). Dense batches are the varlen case with uniform cu_seqlens.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/allocator.h"
#include "core/status.h"
#include "core/tensor.h"

namespace vlm::flash {

enum class FlashDType : uint8_t { bf16, f16 };

// Which kernel family runs. auto_select takes the Hopper path where it is built and supports the problem.
enum class FlashPath : uint8_t { auto_select, portable, hopper };

struct FlashFwdParams {
  const void* q = nullptr;  // [Tq, Hq, D]
  const void* k = nullptr;  // [Tk, Hkv, D]
  const void* v = nullptr;  // [Tk, Hkv, D]
  void* out = nullptr;      // [Tq, Hq, D]
  float* lse = nullptr;     // [Hq, lse_head_stride]: row t of head h at lse[h * lse_head_stride + t]
  const int32_t* cu_seqlens_q = nullptr;  // device, [batch + 1]
  const int32_t* cu_seqlens_k = nullptr;  // device, [batch + 1]
  // Strides in elements (the last dim is contiguous).
  int64_t q_row_stride = 0, q_head_stride = 0;
  int64_t k_row_stride = 0, k_head_stride = 0;
  int64_t v_row_stride = 0, v_head_stride = 0;
  int64_t out_row_stride = 0, out_head_stride = 0;
  int64_t lse_head_stride = 0;  // usually Tq
  int batch = 0;
  int n_heads_q = 0, n_heads_kv = 0;
  int head_dim = 0;
  int max_seqlen_q = 0, max_seqlen_k = 0;  // upper bounds of the per-sequence lengths (sizes the grid)
  // Rows of q and of k/v (the TMA descriptors of the Hopper path need the extents; 0 = unknown, portable path).
  int total_q = 0, total_k = 0;
  float scale = 0.f;                       // softmax scale, > 0 (usually 1/sqrt(D))
  bool causal = false;
  FlashDType dtype = FlashDType::bf16;
  FlashPath path = FlashPath::auto_select;
};

struct FlashBwdParams {
  const void* q = nullptr;     // [Tq, Hq, D]
  const void* k = nullptr;     // [Tk, Hkv, D]
  const void* v = nullptr;     // [Tk, Hkv, D]
  const void* out = nullptr;   // [Tq, Hq, D] the forward's output
  const void* dout = nullptr;  // [Tq, Hq, D]
  const float* lse = nullptr;  // [Hq, lse_head_stride] the forward's log-sum-exp
  void* dq = nullptr;          // [Tq, Hq, D] overwritten
  void* dk = nullptr;          // [Tk, Hkv, D] overwritten
  void* dv = nullptr;          // [Tk, Hkv, D] overwritten
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int64_t q_row_stride = 0, q_head_stride = 0;
  int64_t k_row_stride = 0, k_head_stride = 0;
  int64_t v_row_stride = 0, v_head_stride = 0;
  int64_t out_row_stride = 0, out_head_stride = 0;
  int64_t dout_row_stride = 0, dout_head_stride = 0;
  int64_t dq_row_stride = 0, dq_head_stride = 0;
  int64_t dk_row_stride = 0, dk_head_stride = 0;
  int64_t dv_row_stride = 0, dv_head_stride = 0;
  int64_t lse_head_stride = 0;
  int batch = 0;
  int n_heads_q = 0, n_heads_kv = 0;
  int head_dim = 0;
  int max_seqlen_q = 0, max_seqlen_k = 0;
  int total_q = 0;  // rows of q (sizes the workspace)
  int total_k = 0;  // rows of k/v (the Hopper path's TMA descriptors need it; 0 = portable path)
  float scale = 0.f;
  bool causal = false;
  // Deterministic: dq is computed by its own pass over the keys in a fixed order instead of fp32 atomics, so two
  // runs give bit-identical dq, dk, dv (dk/dv are deterministic in both modes).
  bool deterministic = false;
  FlashDType dtype = FlashDType::bf16;
  FlashPath path = FlashPath::auto_select;
  // Optional workspace of flash_bwd_workspace_bytes(*this) bytes on the device; when null, flash_bwd takes it from
  // vlm::cuda_allocator(current device) on `stream` and returns it there.
  void* workspace = nullptr;
};

// True when this build has the CUDA kernels (vlm_flash linked against a CUDA build).
bool flash_built();

// Checks the parameters (supported head dim, head ratio, strides and alignment); does not read device memory.
Status flash_fwd_check(const FlashFwdParams& p);
Status flash_bwd_check(const FlashBwdParams& p);

// Launches on `stream` (a cudaStream_t; null = default stream). Returns the check's Status without launching
// when the parameters are unsupported.
Status flash_fwd(const FlashFwdParams& p, StreamHandle stream);
Status flash_bwd(const FlashBwdParams& p, StreamHandle stream);
size_t flash_bwd_workspace_bytes(const FlashBwdParams& p);

// The path flash_fwd / flash_bwd would take for these parameters (never auto_select).
FlashPath flash_fwd_path(const FlashFwdParams& p);
FlashPath flash_bwd_path(const FlashBwdParams& p);

// ---- Tensor-level wrappers (CUDA tensors; cu_seqlens i32 on the same device) -------------------------------------
struct FlashOptions {
  float scale = 0.f;  // 0 means 1/sqrt(D)
  bool causal = false;
  bool deterministic = false;  // backward only
  FlashPath path = FlashPath::auto_select;
};

// out [Tq, Hq, D] and lse [Hq, Tq] must be allocated by the caller (out may have a row stride).
Status flash_attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k, int max_seqlen_q,
                               int max_seqlen_k, const FlashOptions& options, StreamHandle stream = nullptr);
// dq, dk, dv overwritten.
Status flash_attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                                const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                                const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k, int max_seqlen_q,
                                int max_seqlen_k, const FlashOptions& options, StreamHandle stream = nullptr);

}  // namespace vlm::flash
