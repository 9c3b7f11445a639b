// The CUDA ops, at the Tensor level: one entry per op of kernels/ops.h, called by ops/<family>.cpp after it has
// validated shapes, dtypes, devices and contiguity (so these only read sizes and pointers), grouped by the file that
// defines them, cuda/<family>.cu. Semantics, shapes and the dtype contract are those of ops.h. Every entry runs on
// current_stream() of the output's device (cuda_context.h), launches asynchronously and never synchronizes.
// No CUDA headers here: the op boundary includes this file when built with VLM_HAVE_CUDA.
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"
#include "kernels/adamw_scalars.h"
#include "kernels/ops.h"

namespace vlm::ops::cuda {

// ---- gemm.cpp (cuBLASLt) ---------------------------------------------------------------------------------------
// out[m, n] = alpha * op(a) @ op(b) + beta * out per batch entry (batch = 0 for plain 2-D tensors).
void matmul(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta,
            bool batched);
void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b);
void linear_add_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& residual);
// pre = x @ w^T + b;  y = gelu_tanh(pre) (the cuBLASLt GELU_AUX_BIAS epilogue where it applies).
void linear_gelu_forward(Tensor& y, Tensor& pre, const Tensor& x, const Tensor& w, const Tensor& b);
void linear_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w);
void linear_dgelu_backward(Tensor& dpre, const Tensor& dy, const Tensor& w, const Tensor& pre);
// Autotuning of the cuBLASLt algorithm per problem (see ops::set_gemm_autotune).
void set_gemm_autotune(bool on);
// ops::WeightGradOverlap's scope on `device` (nested scopes count; the outermost end joins the side stream).
void weight_grad_overlap_begin(Device device);
void weight_grad_overlap_end(Device device);

// ---- gemv.cu: linear layers over at most kGemvMaxRows rows, with their neighbours fused ---------------------------
// y = epilogue(norm(x) @ w^T + b): norm is RMSNorm with norm_w when defined (the normalized rows rounded to the compute
// dtype, as rmsnorm_forward stores them); the epilogue adds residual when defined, or with swiglu (w [2I, in]: gate
// rows, then up rows) gives y[T, I] = silu(gate) * up of the rounded products. y is in the compute dtype, or f32 for a
// plain product (logits). Returns false, launching nothing, when the call does not fit the kernel (more rows, a row
// width not a multiple of 16 bytes, misaligned tensors, an f32 y with swiglu or a residual); the caller then runs the
// general path. Tensors are validated and contiguous.
inline constexpr int kGemvMaxRows = 8;
bool gemv_forward(Tensor& y, const Tensor& x, const Tensor& norm_w, float eps, const Tensor& w, const Tensor& b,
                  const Tensor& residual, bool swiglu);
// ops::rmsnorm_qkv_paged_write as one GEMV (validated tensors); false, launching nothing, when the call does not fit.
bool gemv_qkv_paged_write(Tensor& q, Tensor& k_cache, Tensor& v_cache, const Tensor& x, const Tensor& norm_w,
                          float eps, const Tensor& w, const Tensor& b, const Tensor& positions,
                          const Tensor& slot_mapping, float theta);

// ---- op_graph.cpp (ops::OpGraph) ----------------------------------------------------------------------------------
// Captures `ops` on a capture stream of `device` with allocations from the pool `pool`; returns the instantiated
// cudaGraphExec_t and sets the node count.
void* graph_capture(Device device, const void* pool, const std::function<void()>& ops, size_t& nodes);
void graph_replay(void* exec, Device device);
void graph_destroy(void* exec);

// ---- pdl.cuh (defined in elementwise.cu) -------------------------------------------------------------------------
// Tests: every later launch of our kernels with programmatic dependent launch (1), without (0), or back to the
// default, with (-1).
void set_pdl_for_testing(int on);

// ---- attention.cu ------------------------------------------------------------------------------------------------
// Whether attention_backward asks FlashAttention for its deterministic backward (see ops::set_attention_deterministic).
void set_attention_deterministic(bool on);
bool attention_deterministic();
// Whether bf16 attention goes to FlashAttention where it applies (see ops::set_attention_flash).
void set_attention_flash(bool on);
bool attention_flash();

// ---- reduce.cu -------------------------------------------------------------------------------------------------
// out[c] += sum_r in[r, c] over rows (f32 out, in f32 or bf16): per-chunk partial sums, then a second pass in order.
void column_sums_accumulate(Tensor& out, const Tensor& in, int64_t rows, int64_t cols);

// ---- elementwise.cu --------------------------------------------------------------------------------------------
void cast(Tensor& out, const Tensor& in);
void fill(Tensor& x, float value);
void scale(Tensor& x, float s);
void add(Tensor& out, const Tensor& a, const Tensor& b);
void add_inplace(Tensor& a, const Tensor& b);
void add_rows_broadcast(Tensor& x, const Tensor& pos, int64_t blocks);
void add_rows_broadcast_backward(Tensor& dpos, const Tensor& dx, int64_t blocks);

// ---- activation.cu ---------------------------------------------------------------------------------------------
void gelu_tanh_forward(Tensor& y, const Tensor& x);
void gelu_tanh_backward(Tensor& dx, const Tensor& dy, const Tensor& x);
void swiglu_forward(Tensor& y, const Tensor& gate, const Tensor& up);
void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dy, const Tensor& gate, const Tensor& up);

// ---- norm.cu ---------------------------------------------------------------------------------------------------
// `residual` (optional): h = x + residual is formed first, stored into `h` and normalized.
void layernorm_forward(Tensor& h, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& residual,
                       const Tensor& w, const Tensor& b, float eps);
// `dres` (optional) is added into dx (dx may alias dres).
void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& dres, const Tensor& x,
                        const Tensor& w, const Tensor& mean, const Tensor& rstd);
void rmsnorm_forward(Tensor& h, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& residual, const Tensor& w,
                     float eps);
void rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& dres, const Tensor& x, const Tensor& w,
                      const Tensor& rstd);

// ---- rope.cu ---------------------------------------------------------------------------------------------------
void rope(Tensor& x, const Tensor& positions, float theta, bool backward);

// ---- packed.cu -------------------------------------------------------------------------------------------------
// positions may be undefined when theta == 0 (no rotation).
void qkv_split_forward(Tensor& q, Tensor& k, Tensor& v, const Tensor& qkv, const Tensor& positions, float theta);
void qkv_split_backward(Tensor& dqkv, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& positions,
                        float theta);
// The split with the k/v heads written to paged cache slots (ops::qkv_split_paged_write), one launch.
void qkv_split_paged_write(Tensor& q, Tensor& k_cache, Tensor& v_cache, const Tensor& qkv, const Tensor& positions,
                           const Tensor& slot_mapping, float theta);
void swiglu_packed_forward(Tensor& y, const Tensor& gu);
void swiglu_packed_backward(Tensor& dgu, const Tensor& dy, const Tensor& gu);

// ---- attention.cu ----------------------------------------------------------------------------------------------
void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k, int max_seqlen_q, int max_seqlen_k,
                       float scale, bool causal, bool cu_seqlens_checked);
void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& cu_seqlens_q,
                        const Tensor& cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, float scale, bool causal,
                        bool cu_seqlens_checked);
void check_cu_seqlens(const Tensor& cu_seqlens, int64_t rows, int max_seqlen);

// ---- paged_attention.cu ----------------------------------------------------------------------------------------
void paged_kv_write(Tensor& k_cache, Tensor& v_cache, const Tensor& k, const Tensor& v, const Tensor& slot_mapping);
void paged_attention(Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const Tensor& block_tables, const Tensor& context_lens, const Tensor& cu_seqlens_q,
                     int max_seqlen_q, int max_context_len, float scale, bool indices_checked);

// ---- loss.cu ---------------------------------------------------------------------------------------------------
// losses and dlogits are each optional (at least one defined); dlogits may alias logits.
void argmax_rows(Tensor& ids, const Tensor& logits, int32_t banned);
void gumbel_argmax_rows(Tensor& ids, const Tensor& logits, const Tensor& inv_temperature, const Tensor& keys,
                        int32_t banned);
void cross_entropy(Tensor& losses, Tensor& dlogits, const Tensor& logits, const Tensor& targets, float dloss,
                   int ignore_index);

// ---- embedding.cu ----------------------------------------------------------------------------------------------
void embedding_forward(Tensor& out, const Tensor& table, const Tensor& ids);
void embedding_backward(Tensor& dtable, const Tensor& dout, const Tensor& ids);
void scatter_rows(Tensor& out, const Tensor& src, const Tensor& index);
void gather_rows(Tensor& out, const Tensor& src, const Tensor& index);

// ---- layout.cu -------------------------------------------------------------------------------------------------
// Forward: dst = patches, src = images [B, channels, height, width]; backward: dst = dimages, src = dpatches.
void image_to_patches(Tensor& dst, const Tensor& src, int64_t channels, int64_t height, int64_t width, int64_t patch,
                      bool backward);
// Forward: dst = y, src = x [B, side * side, cols]; backward: dst = dx, src = dy.
void pixel_shuffle(Tensor& dst, const Tensor& src, int64_t side, int64_t cols, int64_t factor, bool backward);

// ---- quant.cu --------------------------------------------------------------------------------------------------
void quantize_fp8_blocks(Tensor& q, Tensor& scales, const Tensor& x);
void dequantize_fp8_blocks(Tensor& x, const Tensor& q, const Tensor& scales);

// ---- optimizer.cu ----------------------------------------------------------------------------------------------
// The step's scalars as kernels/adamw_scalars.h defines them (grad_sum_of_squares, when set, in device memory).
// Every entry validated: param, grad, m, v f32 of one shape; param_bf16 undefined or bf16 of that shape.
void adamw_step_multi(const std::vector<AdamWTensors>& tensors, const AdamWScalars& s);
// Every tensor contiguous, all on one device: their bytes set to zero.
void zero_multi(const std::vector<Tensor>& tensors);
// out: f64 [1] on the tensors' device; no synchronization.
void sum_of_squares_into(Tensor& out, const std::vector<Tensor>& tensors);
void sum_into(Tensor& out, const Tensor& x);

}  // namespace vlm::ops::cuda
