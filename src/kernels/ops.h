// Every op vlm.cpp computes, declared once, grouped by family (the sections below). A family's files share its name:
// the op boundary ops/<family>.cpp validates shapes/dtypes and dispatches on the device of the output, to the plain CPU
// reference cpu/<family>.cpp or the fast CUDA version cuda/<family>.cu (gemm: cuda/gemm.cpp, on cuBLASLt); its tests
// are tests/kernels/test_<family>.cpp and tests/kernels/cuda/test_cuda_<family>.cpp. Families: gemm, elementwise, norm,
// activation, rope, packed, attention, paged_attention, loss, embedding, layout, quant, optimizer; lm_head composes gemm and
// loss ops (ops/lm_head.cpp, tests/kernels/test_lm_head.cpp); fused_linear composes norm, gemm and packed ops, with
// its own CUDA kernel (cuda/gemv.cu) for few rows. supports(), the device-level switches and streams
// declared among the families, and check_index_errors are defined in ops.cpp. Layout conventions:
//   * activations are row-major 2-D [T, C] (T = tokens or rows, C = channels) unless stated; linear, layernorm
//     and rmsnorm also take [..., C], flattening the leading dims into T;
//   * linear weights use the Hugging Face layout W [out_features, in_features];
//   * attention tensors are [T, H, D] with sequences packed back to back and delimited by cu_seqlens (i32 [B+1]).
// Gradient contract (llm.c's): backward functions OVERWRITE (=) activation gradients (dx, dq, ...) and ACCUMULATE
// (+=) into parameter gradients (dw, db, dtable, dpos). An undefined gradient tensor means "not needed": it is
// skipped.
//
// Dtype contract:
//   * CPU: every floating tensor is f32 (the reference backend); a bf16 tensor on the CPU aborts naming the op and
//     the tensor (cast() is the one op that converts there).
//   * CUDA: activations (x, y, dx, dy, q, k, v, out, dout, logits, dlogits, gate, up, images, patches, ...) are f32
//     OR bf16, and all the activations of one call share one dtype, the call's "compute dtype". bf16 is the
//     training dtype; f32 exists so an fp32 GPU run can be compared tightly with the CPU run.
//   * Parameters passed to an op (w, b, norm weights, embedding table, position table) are in the compute dtype.
//   * Parameter gradients (dw, db, dtable, dpos) are f32 and ACCUMULATED (+=) on every device: bf16 inputs, fp32
//     accumulation and output (cuBLASLt: A/B bf16, C/D f32, compute 32F).
//   * Statistics (mean, rstd, lse, losses) are f32. ids, targets, positions, index, cu_seqlens and the
//     paged cache's tables (slot_mapping, block_tables, context_lens) are i32 on the op's device. AdamW's param (the
//     fp32 master), grad, m and v are f32; it can also write a bf16 copy of the updated weights in the same pass.
//   * Inside CUDA kernels all math and every reduction runs in fp32 (sum_of_squares in fp64); a bf16 result is
//     rounded to nearest even once, when stored.
// Determinism: CUDA reductions (norm weight grads, bias grads, dpos, dtable, attention, losses, sum_of_squares) use
// fixed-order trees and per-block partials summed in a second pass, never float atomics, so repeating a call on the
// same device and shapes gives bit-identical results (GEMMs: cuBLASLt with the algorithm cached per shape).
// Bad indices: CPU ops abort naming the entry. CUDA ops cannot abort without a host sync, so they write NaN where
// the bad index was used and record the first one; check_index_errors() reports it (with VLM_CUDA_SYNC=1 each op
// checks right after its launch and aborts naming the entry).
// Streams: CUDA ops run asynchronously on the current stream of the output's device (kernels/cuda/cuda_context.h;
// the legacy default stream unless set). Only the sum_of_squares that returns a double, check_index_errors and a
// HostReadback's first read synchronize (the last with its own copy only).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace vlm::ops {

// True when `op` (e.g. "attention_forward") has an implementation for `device` (every op on the CPU; every op on
// CUDA in a build with VLM_CUDA).
bool supports(const std::string& op, Device device);

// ---- GEMM --------------------------------------------------------------------------------------------------
// CUDA GEMMs run the cuBLASLt heuristic's first algorithm for each problem unless autotuning is on (this call; the
// trainer's set_deterministic(false)): then the fastest of its top candidates, timed on the first call of each
// problem. Either way a problem keeps its algorithm for the process's life (repeats are bit-identical); autotuned
// choices may differ between processes. No effect on the CPU.
void set_gemm_autotune(bool on);

// out[M, N] = alpha * op(a) @ op(b) + beta * out, op(x) = x or x^T. 2-D contiguous tensors. a and b share the
// compute dtype; out is in the compute dtype or f32 (bf16 inputs, f32 output). beta == 0 ignores out's contents.
void matmul(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha = 1.f,
            float beta = 0.f);
// Batched: a, b, out are 3-D with the same leading batch size; same semantics per batch entry.
void matmul_batched(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha = 1.f,
                    float beta = 0.f);

// Weight gradients (linear_backward's dw) issued while one of these lives run on a second stream of the device,
// beside the scope's other work (the next input gradients, norms, attention); the outermost scope's end makes the
// current stream wait for them and releases the dy and x they read (the models open one per block: joining later
// only holds those inputs longer). Without a scope, linear_backward still runs its dw beside
// its own dx. Results are bit-identical either way (same algorithms, same accumulation order into each dw). Param
// gradients a scope's weight gradients write must not be read inside it. No effect on the CPU.
class WeightGradOverlap {
 public:
  explicit WeightGradOverlap(Device device);
  ~WeightGradOverlap();
  WeightGradOverlap(const WeightGradOverlap&) = delete;
  WeightGradOverlap& operator=(const WeightGradOverlap&) = delete;

 private:
  Device device_;
};

// y[T, out] = x[T, in] @ w[out, in]^T + b[out] (b may be undefined).
void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b);
// A block's closing residual: y[T, out] = x[T, in] @ w[out, in]^T + b[out] + residual[T, out] (b may be
// undefined; y must not alias residual or x). On CUDA one cuBLASLt GEMM reading the residual as its C operand
// (beta = 1), so neither the product nor the sum makes an extra pass over memory; on the CPU linear_forward then
// the add, bit for bit.
void linear_add_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& residual);
// dx[T, in] = dy @ w (overwrite);  dw[out, in] += dy^T @ x;  db[out] += sum_t dy[t, :].
void linear_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w);
// The ViT MLP's first layer: pre[T, out] = x @ w^T + b (b may be undefined), y = gelu_tanh(pre); pre is saved for
// the backward (gelu_tanh_backward(dpre, dy, pre), then linear_backward with dpre). On CUDA with bf16 this is one
// cuBLASLt GEMM with the GELU_AUX_BIAS epilogue where cuBLASLt supports the shape.
void linear_gelu_forward(Tensor& y, Tensor& pre, const Tensor& x, const Tensor& w, const Tensor& b);
// Its backward through the next layer and the GELU: dpre[T, in] = (dy[T, out] @ w[out, in]) * gelu_tanh'(pre[T, in])
// (overwrite; dpre must not alias dy or pre). On CUDA with bf16 one cuBLASLt GEMM with the DGELU epilogue reading
// pre where cuBLASLt supports the shape (in a multiple of 8), else the GEMM, then gelu_tanh_backward.
void linear_dgelu_backward(Tensor& dpre, const Tensor& dy, const Tensor& w, const Tensor& pre);

// ---- fused_linear: a pre-norm block's projections with their neighbours --------------------------------------
// y[T, out] = rmsnorm(x; norm_w, eps) @ w[out, in]^T + b[out] (b may be undefined): a block's first projection, or
// the final norm and LM head with an f32 y (the logits, holding the values the compute dtype stores). Equal to
// rmsnorm_forward (its rows rounded to the compute dtype) then linear_forward, up to the order of the fp32 sums; on
// the CPU exactly that. On CUDA, calls of at most 8 rows (a decode step at small batch) are one GEMV kernel that
// normalizes x on the way in (cuda/gemv.cu).
void rmsnorm_linear_forward(Tensor& y, const Tensor& x, const Tensor& norm_w, float eps, const Tensor& w,
                            const Tensor& b);
// y[T, I] = swiglu_packed(rmsnorm(x) @ w[2I, in]^T + b[2I]): the MLP's norm, packed gate/up projection (gate rows,
// then up rows) and SwiGLU, the products rounded to the compute dtype before the SwiGLU as the packed tensor would be.
void rmsnorm_linear_swiglu_forward(Tensor& y, const Tensor& x, const Tensor& norm_w, float eps, const Tensor& w,
                                   const Tensor& b);

// ---- elementwise -------------------------------------------------------------------------------------------
// out = in converted between f32 and bf16 (round to nearest even; a plain copy when the dtypes match). Same shape,
// same device, any device.
void cast(Tensor& out, const Tensor& in);
void fill(Tensor& x, float value);
void scale(Tensor& x, float s);                              // x *= s
void add(Tensor& out, const Tensor& a, const Tensor& b);     // out = a + b (out may alias a or b)
void add_inplace(Tensor& a, const Tensor& b);                // a += b
// x[B*P, C] += pos[P, C] broadcast over B (rows of x are B blocks of P rows).
void add_rows_broadcast(Tensor& x, const Tensor& pos);
// dpos[P, C] += sum over the B blocks of dx[B*P, C].
void add_rows_broadcast_backward(Tensor& dpos, const Tensor& dx);

// ---- norm: normalization over the last dim C, rows independent ---------------------------------------------
// y = (x - mean) * rstd * w + b;  mean, rstd [T] are saved for the backward (either may be undefined when no
// backward follows; b may be undefined: no bias).
void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& b,
                       float eps);
// dx = overwrite; dw, db += .
void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& mean, const Tensor& rstd);
// y = x * rstd * w,  rstd = 1 / sqrt(mean(x^2) + eps) [T] saved (may be undefined when no backward follows).
void rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps);
void rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd);
// Fused residual add + norm (pre-norm transformer blocks): h = x + residual (the updated residual stream, stored in
// the compute dtype; h may alias x or residual), y = norm(h) with mean/rstd saved as above.
void add_layernorm_forward(Tensor& h, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& residual,
                           const Tensor& w, const Tensor& b, float eps);
void add_rmsnorm_forward(Tensor& h, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& residual, const Tensor& w,
                         float eps);
// Their backward: dh = norm_backward(dy) + dh_next (overwrite; dh_next is the gradient reaching h through the
// residual stream, and dh may alias it); dh is then the gradient of both x and residual. dw, db += .
void add_layernorm_backward(Tensor& dh, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& dh_next,
                            const Tensor& h, const Tensor& w, const Tensor& mean, const Tensor& rstd);
void add_rmsnorm_backward(Tensor& dh, Tensor& dw, const Tensor& dy, const Tensor& dh_next, const Tensor& h,
                          const Tensor& w, const Tensor& rstd);

// ---- activation --------------------------------------------------------------------------------------------
// GELU with the tanh approximation (SigLIP's gelu_pytorch_tanh).
void gelu_tanh_forward(Tensor& y, const Tensor& x);
void gelu_tanh_backward(Tensor& dx, const Tensor& dy, const Tensor& x);
// y = silu(gate) * up, all [T, F].
void swiglu_forward(Tensor& y, const Tensor& gate, const Tensor& up);
void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dy, const Tensor& gate, const Tensor& up);

// ---- rope: rotary position embedding (Llama / Hugging Face "rotate_half" layout) ---------------------------
// In place on x [T, H, D] (on CUDA also row-strided: each token's H x D contiguous, tokens further apart, e.g. the
// q and k heads of a packed projection): for i < D/2, with a = pos[t] * theta^(-2i/D):
//   x'[i] = x[i] cos a - x[i + D/2] sin a;   x'[i + D/2] = x[i + D/2] cos a + x[i] sin a.
void rope_forward(Tensor& x, const Tensor& positions, float theta);
// In place on dx [T, H, D]: the transpose rotation (by -a).
void rope_backward(Tensor& dx, const Tensor& positions, float theta);

// ---- packed: ops on packed projections (one GEMM for q/k/v, one for gate/up) -------------------------------
// The packed QKV projection's output qkv [T, (Hq + 2 Hkv) * D] (columns: Hq query heads, then Hkv key heads, then
// Hkv value heads, D each) split into contiguous q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, D]; with theta > 0, RoPE
// exactly as rope_forward (same angles, rotate_half layout) is applied to q and k (positions i32 [T]); theta == 0:
// no rotation (positions may be undefined; a defined one is still checked). D even, theta >= 0. q, k, v must not
// overlap qkv or each other. Equals slicing + copying + rope_forward bit for bit on each device.
void qkv_split_forward(Tensor& q, Tensor& k, Tensor& v, const Tensor& qkv, const Tensor& positions, float theta);
// The backward: dqkv [T, (Hq + 2 Hkv) * D] (overwrite) = [rope_backward(dq) | rope_backward(dk) | dv] (no rotation
// when theta == 0). dq/dk/dv are not modified and must not overlap dqkv.
void qkv_split_backward(Tensor& dqkv, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& positions,
                        float theta);
// SwiGLU on the packed gate/up projection gu [T, 2I] (columns: gate then up): y [T, I] = silu(gate) * up (leading
// dims flatten into T). y must not overlap gu. Equals swiglu_forward on the halves bit for bit on the CPU.
void swiglu_packed_forward(Tensor& y, const Tensor& gu);
// dgu [T, 2I] (overwrite) = [dgate | dup] for dy [T, I]; the formulas of swiglu_backward. dgu may be gu itself (the
// gradient replaces the saved projection in place) but must not otherwise overlap gu or dy.
void swiglu_packed_backward(Tensor& dgu, const Tensor& dy, const Tensor& gu);

// ---- attention ---------------------------------------------------------------------------------------------
// Variable-length multi-head attention with grouped-query heads (Hq % Hkv == 0; q head h reads kv head h / (Hq/Hkv)).
//   q [Tq, Hq, D], k, v [Tk, Hkv, D]; cu_seqlens_q/k i32 [B+1] (sequence b is rows [cu[b], cu[b+1]));
//   out [Tq, Hq, D]; lse [Hq, Tq] f32 = log-sum-exp of the scaled scores of each query row.
//   On CUDA, q, k, v (and dq, dk, dv) may also be row-strided: each row's H x D contiguous, rows further apart (column
//   slices of a packed qkv projection); elsewhere tensors are contiguous.
// Causal masks are bottom-right aligned: in a sequence with Lq queries and Lk keys, query i sees keys
// j <= i + Lk - Lq. A query row that sees no key gets out = 0 and lse = -inf.
// cu_seqlens are checked (0 = cu[0] <= ... <= cu[B] = the tensor's rows, each length <= max_seqlen; on CUDA by a
// one-block kernel, reported like the index errors above) unless cu_seqlens_checked: the caller then vouches that
// check_cu_seqlens passed them for these row counts and max lengths and that they have not changed since (a model
// checks its batch's once for all of its layers' forward and backward calls: 2 check launches a training step
// instead of 84).
void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k, int max_seqlen_q, int max_seqlen_k,
                       float scale, bool causal, bool cu_seqlens_checked = false);
// The attention ops' check of one cu_seqlens (i32 [B+1], B >= 0) for `rows` rows and max_seqlen, alone: on the CPU
// at once (aborting with the bad entry named), on CUDA on the device (found by check_index_errors).
void check_cu_seqlens(const Tensor& cu_seqlens, int64_t rows, int max_seqlen);
// dq, dk, dv overwritten (dk/dv sum over the q heads that share a kv head).
// CUDA: by default the fastest backward (the Hopper FlashAttention backward where it applies), whose dQ sums arrive
// by TMA reduce-adds in no fixed order, so the last bits of dq vary run to run (as PyTorch's SDPA backends do).
// set_attention_deterministic(true), or train.deterministic = true (set_deterministic), switches to the portable
// backward that sums dQ per query block in a fixed order: bit-identical gradients run to run (and with activation
// recomputation), at about half the backward's speed on Hopper. The CPU always is.
void set_attention_deterministic(bool on);
bool attention_deterministic();
// CUDA attention through our FlashAttention kernels wherever they support the problem (the default) or, off, through
// the simple kernels for every problem: the correct but slow CUDA attention that flash replaced, kept so the two can be
// compared in the training step (`vlm bench train --attention simple`; the environment VLM_ATTENTION_FLASH=0 for other
// commands). No effect on the CPU.
void set_attention_flash(bool on);
bool attention_flash();
// The trainer's and the training benchmark's switch (train.deterministic): on, bit-identical results run to run (the
// deterministic attention backward, cuBLASLt's heuristic GEMM algorithms); off, the fastest kernels (the Hopper
// attention backward, GEMM algorithms autotuned per shape on first use). No effect on the CPU.
void set_deterministic(bool on);
void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& cu_seqlens_q,
                        const Tensor& cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, float scale, bool causal,
                        bool cu_seqlens_checked = false);

// ---- paged_attention: the paged KV cache of the inference engine --------------------------------------------
// K and V live in fixed-size blocks: k_cache, v_cache [num_blocks, block_size, Hkv, D] (contiguous, the compute dtype;
// the same dtype as k, v, q and out). Cache slot s is row s % block_size of block s / block_size.
//
// Writes row t of k, v [T, Hkv, D] into slot slot_mapping[t] (i32 [T]) of each cache; -1 skips the row (padding).
// Slots must lie in [-1, num_blocks * block_size) and be distinct (two rows writing one slot race on CUDA). On
// CUDA, k and v may be row-strided (column slices of a packed qkv projection); a bad slot is recorded
// (check_index_errors) and its row skipped.
void paged_kv_write(Tensor& k_cache, Tensor& v_cache, const Tensor& k, const Tensor& v, const Tensor& slot_mapping);
// The paged step's qkv_split_forward and paged_kv_write in one op (one kernel on CUDA): q [T, H, D] = the q heads of
// qkv [T, (H + 2 Hkv) D] with RoPE at positions (theta > 0; theta == 0: none), as qkv_split_forward writes them; the k
// heads (with RoPE) and v heads of row t go straight to cache slot slot_mapping[t] (i32 [T]; distinct, as for
// paged_kv_write), as paged_kv_write would write them (-1: the row's k/v are skipped). D even; the caches' Hkv and D.
// Equals qkv_split_forward into temporaries + paged_kv_write bit for bit on each device. A bad slot aborts naming the
// entry on the CPU; on CUDA it is recorded (check_index_errors) and that row's k/v skipped (its q still written).
// q must not overlap qkv or the caches, nor qkv a cache, nor the caches each other.
void qkv_split_paged_write(Tensor& q, Tensor& k_cache, Tensor& v_cache, const Tensor& qkv, const Tensor& positions,
                           const Tensor& slot_mapping, float theta);
// The decode step's first op of a layer: qkv = rmsnorm(x; norm_w, eps) @ w[(Hq + 2 Hkv) D, in]^T + b, then
// qkv_split_paged_write of it (q with RoPE; k, v into the rows' cache slots). Equal to rmsnorm_linear_forward into a
// temporary then qkv_split_paged_write, up to the order of the fp32 sums; on the CPU exactly that. On CUDA, calls of
// at most 8 rows (head dim <= 256) are one GEMV kernel whose warps compute each (head, frequency pair) and rotate and
// store it (cuda/gemv.cu). x must not overlap q or the caches.
void rmsnorm_qkv_paged_write(Tensor& q, Tensor& k_cache, Tensor& v_cache, const Tensor& x, const Tensor& norm_w,
                             float eps, const Tensor& w, const Tensor& b, const Tensor& positions,
                             const Tensor& slot_mapping, float theta);
// Attention of packed queries over the paged cache, grouped-query (Hq % Hkv == 0; q head h reads kv head
// h / (Hq/Hkv)).
//   q [Tq, Hq, D] packed by sequence, cu_seqlens_q i32 [B + 1] (sequence b's queries are rows [cu[b], cu[b+1]));
//   block_tables i32 [B, max_blocks_per_seq]: sequence b's cache position p is in block block_tables[b, p / block_size]
//   at row p % block_size; context_lens i32 [B]: sequence b has L_b = context_lens[b] keys (positions [0, L_b)),
//   its own queries' K/V included (write them with paged_kv_write first);
//   out [Tq, Hq, D] (contiguous).
// The Lq_b = cu[b+1] - cu[b] queries of sequence b are its last Lq_b positions (bottom-right causal): query i sees
// keys j <= i + L_b - Lq_b. Decode is Lq_b = 1 (every key visible); chunked prefill is Lq_b > 1 over earlier
// chunks' K/V already in the cache. Only the first ceil(L_b / block_size) entries of row b of block_tables are read
// (the rest may hold anything, e.g. -1).
// Checked (on the CPU at once, aborting with the entry named; on CUDA by a one-block kernel recording the first
// violation for check_index_errors, the main kernels clamping so nothing is read out of bounds): cu_seqlens_q as
// check_cu_seqlens(cu_seqlens_q, Tq, max_seqlen_q); Lq_b <= L_b <= min(max_context_len, max_blocks_per_seq *
// block_size); every block id read in [0, num_blocks). indices_checked: the caller vouches that an earlier call
// with the same block_tables, context_lens, cu_seqlens_q, bounds and num_blocks passed these checks (an engine
// checks once per step for all of its layers). On CUDA, max_context_len (a host-side bound, not the exact maximum)
// sets how many splits of the context the decode kernel spreads over the GPU; a CUDA graph captured with a bound
// stays correct for every batch within it.
void paged_attention(Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const Tensor& block_tables, const Tensor& context_lens, const Tensor& cu_seqlens_q,
                     int max_seqlen_q, int max_context_len, float scale, bool indices_checked = false);

// ---- loss --------------------------------------------------------------------------------------------------
// losses[T] = logsumexp(logits[t]) - logits[t, targets[t]]; rows whose target == ignore_index get loss 0.
// targets i32 [T]; a target outside [0, V) other than ignore_index aborts naming the row.
void cross_entropy_forward(Tensor& losses, const Tensor& logits, const Tensor& targets, int ignore_index);
// dlogits[T, V] = (softmax(logits) - onehot(target)) * dloss (overwrite; zero rows for ignored targets).
// dlogits may alias logits (the logits are then overwritten by their gradient).
void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& targets, float dloss,
                            int ignore_index);
// Both in one pass over the logits (the chunked LM head computes one chunk of logits, then this): losses as the
// forward, dlogits as the backward; dlogits may alias logits. On CUDA: one block per row, the vocabulary read in
// chunks with an online max/sum in fp32, no fp32 copy of the logits.
void cross_entropy_forward_backward(Tensor& losses, Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                    float dloss, int ignore_index);

// ids[R] = the index of the largest value of logits[r] (f32 or bf16 [R, V]), the lowest index among equal maxima,
// `banned` (when in [0, V)) never chosen, NaN never chosen; a row with nothing else gives 0. The engine's greedy
// decode: R ids come back to the host instead of R x V logits. ids i32 [R].
void argmax_rows(Tensor& ids, const Tensor& logits, int32_t banned);
// Sampling on the device: ids[r] = argmax over v of logits[r, v] * inv_temperature[r] + g(keys[r], v), with g the
// Gumbel noise of kernels/gumbel.h (a sample of softmax(logits[r] / T) for inv_temperature = 1 / T; a row with
// inv_temperature 0 is argmax_rows's greedy pick). Same rules for banned, NaN and ties as argmax_rows. The draw
// depends on the row's key only: the same key gives the same id on every device, up to floating-point near-ties
// (the CPU's and the GPU's logf may round differently). inv_temperature f32 [R] (>= 0), keys i64 [R], ids i32 [R].
void gumbel_argmax_rows(Tensor& ids, const Tensor& logits, const Tensor& inv_temperature, const Tensor& keys,
                        int32_t banned);

// ---- lm_head: the LM head and its loss, gemm and loss ops composed (ops/lm_head.cpp) -----------------------
// The LM head and its loss over chunks of `chunk_rows` rows, so only one [chunk_rows, V] block of logits exists at a
// time, in the compute dtype (never a full [T, V], never an fp32 copy of bf16 logits). For each chunk: logits =
// hidden @ w^T, then cross_entropy_forward_backward in place, then linear_backward on the logits' gradient.
//   hidden [T, C], w [V, C] (compute dtype); targets i32 [T]; losses f32 [T] (ignored rows: 0);
//   dhidden [T, C] (compute dtype, optional) = dlogits @ w, overwritten;  dw [V, C] (f32, optional) += dlogits^T @
//   hidden;  dlogits = (softmax - onehot) * dloss. With neither gradient defined, only the losses are computed.
void lm_head_cross_entropy(Tensor& losses, Tensor& dhidden, Tensor& dw, const Tensor& hidden, const Tensor& w,
                           const Tensor& targets, float dloss, int ignore_index, int64_t chunk_rows);

// ---- embedding: row gathers and scatters by index ----------------------------------------------------------
// out[T, C] = table[ids[t], :]; ids i32 [T] must lie in [0, V).
void embedding_forward(Tensor& out, const Tensor& table, const Tensor& ids);
// dtable[V, C] += scatter-add of dout rows at ids.
void embedding_backward(Tensor& dtable, const Tensor& dout, const Tensor& ids);
// out[index[i], :] = src[i, :] for each row i of src (index i32 [N], distinct, in range).
void scatter_rows(Tensor& out, const Tensor& src, const Tensor& index);
// out[i, :] = src[index[i], :] (the adjoint of scatter_rows).
void gather_rows(Tensor& out, const Tensor& src, const Tensor& index);

// ---- layout: image patches and the pixel shuffle -----------------------------------------------------------
// Patch extraction (conv with stride = kernel = p, as a GEMM's input): images [B, C, H, W] ->
// patches [B * (H/p) * (W/p), C * p * p], patches row-major over (py, px), features ordered (c, ky, kx) to match a
// Conv2d weight [D, C, p, p] flattened to [D, C*p*p].
void image_to_patches(Tensor& patches, const Tensor& images, int patch);
// The adjoint: dimages = overwrite from dpatches.
void image_to_patches_backward(Tensor& dimages, const Tensor& dpatches, int patch);
// nanoVLM pixel shuffle: x [B, S*S, C] (an S x S grid) -> y [B, (S/r)^2, C*r*r] with
// y[b, ho*(S/r)+wo, (ry*r+rx)*C + c] = x[b, (ho*r+ry)*S + wo*r+rx, c].
void pixel_shuffle_forward(Tensor& y, const Tensor& x, int factor);
void pixel_shuffle_backward(Tensor& dx, const Tensor& dy, int factor);  // dx overwrite

// ---- quant: fp8 E4M3 with one f32 scale per block of 128 elements (kernels/fp8_e4m3.h) ---------------------
// FSDP's fp8 weight gather. Block b covers x[128 b, min(128 (b + 1), n)): scales[b] = amax_b / 448 and
// q[i] = E4M3(x[i] * (448 / amax_b)), rounded to nearest even (an all-zero block: scale 0, codes 0). Dequantized,
// x'[i] = decode(q[i]) * scales[b] (one f32 product, rounded once to x's dtype), so for finite x
//   |x'[i] - x[i]| <= 2^-4 |x[i]| + 2^-10 scales[b] (+ a few f32 roundings: 2^-21 |x[i]|),
// 3 significant bits and subnormal steps of 2^-9 of the block's scale. CPU and CUDA give the same bytes.
int64_t fp8_block_count(int64_t n);  // ceil(n / 128): the scales of n elements
// q [n] u8, scales [fp8_block_count(n)] f32 from x [n] (f32, or bf16 on CUDA).
void quantize_fp8_blocks(Tensor& q, Tensor& scales, const Tensor& x);
// x [n] (f32, or bf16 on CUDA) from q [n] u8 and scales.
void dequantize_fp8_blocks(Tensor& x, const Tensor& q, const Tensor& scales);

// ---- optimizer ---------------------------------------------------------------------------------------------
// AdamW's settings, one struct from the run file to the op: the run file's train.lr, train.beta1, train.beta2,
// train.eps, train.weight_decay and train.grad_clip bind to these fields (so these defaults are the run file's), the
// trainer's optimizer holds them, and the AdamW ops take them. At an op, lr is the step's learning rate (the trainer
// passes the schedule's value, train.lr being its peak) and weight_decay applies to the tensors passed (the trainer
// passes 0 for parameters without decay).
struct AdamWSettings {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;  // decoupled (Loshchilov & Hutter)
  // The global gradient-norm limit (0 = off) of the adamw_step_multi overload that takes the gradients' sum of
  // squares: when norm = sqrt(sum) exceeds it, grads are multiplied by grad_clip / (norm + 1e-6), that factor
  // computed in double and rounded to float once. The other overloads do not clip.
  float grad_clip = 1.f;
};
// One step (1-based, for the bias corrections) on param, grad, m, v (same shape, f32), with g = grad * grad_scale:
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
//   param -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * param),  m_hat = m / (1 - beta1^step),
//   v_hat = v / (1 - beta2^step), the corrections computed in double and rounded to float once.
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWSettings& s, int64_t step,
                float grad_scale = 1.f);
// The same, also writing param_bf16 (bf16, same shape and device) = the updated param rounded to bf16: the weight
// copy the bf16 forward/backward reads.
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWSettings& s, int64_t step,
                float grad_scale, Tensor& param_bf16);
// One parameter tensor of a multi-tensor step; param_bf16 is optional (undefined: no copy written).
struct AdamWTensors {
  Tensor param, grad, m, v;
  Tensor param_bf16;
};
// adamw_step over many tensors (all on one device) with one set of settings; on CUDA a few fused launches cover all
// of them (up to 64 tensors per launch).
void adamw_step_multi(const std::vector<AdamWTensors>& tensors, const AdamWSettings& s, int64_t step,
                      float grad_scale = 1.f);
// The same clipped by s.grad_clip, the norm read from grad_sum_of_squares (f64 [1] on the tensors' device, as the
// sum_of_squares overload below writes it) on the device: a clipped step with no host synchronization.
void adamw_step_multi(const std::vector<AdamWTensors>& tensors, const AdamWSettings& s, int64_t step,
                      const Tensor& grad_sum_of_squares);
// Every byte of every tensor (contiguous, any dtype, all on one device) set to zero: what ParameterStore::zero_grads
// does to a model's few hundred gradient buffers, on CUDA in a few fused launches (up to 64 tensors per launch)
// instead of one memset each.
void zero_multi(const std::vector<Tensor>& tensors);
// Sum of squares of every element of every tensor, accumulated in double, returned as f64 (the global grad norm is
// its square root). On CUDA (f32 or bf16 tensors, all on one device): reduced on the device in fp64 with a fixed
// order, one synchronization for the result.
double sum_of_squares(const std::vector<Tensor>& tensors);
// The same written to out (f64 [1] on the tensors' device; 0 for no elements), no synchronization.
void sum_of_squares(Tensor& out, const std::vector<Tensor>& tensors);
// out (f64 [1]) = the sum of x's elements (f32, any shape, contiguous), accumulated in fp64 in a fixed order (the CPU
// in index order), no synchronization.
void sum(Tensor& out, const Tensor& x);

// ---- host reads (host_readback.cpp) ------------------------------------------------------------------------
// A small tensor's copy to the host, started on the current stream when constructed and waited for only when read.
// On CUDA: an async copy into pinned memory and an event recorded after it, so a read waits for that copy alone,
// not for work queued after it (the training loop reads step n's loss and grad norm after queuing step n + 1, and
// the device never idles waiting for the host). On the CPU the copy is made at once. Copies share the handle.
class HostReadback {
 public:
  HostReadback() = default;
  explicit HostReadback(const Tensor& t);
  bool defined() const { return impl_ != nullptr; }
  // Waits for the copy (the first call), then returns it: a contiguous CPU tensor of t's shape and dtype.
  const Tensor& get() const;
  // The element of a one-element f64 tensor (waits like get()).
  double scalar_f64() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// ---- graphs (ops.cpp; cuda/op_graph.cpp) ----------------------------------------------------------------------
// CUDA graphs: a sequence of ops captured once and replayed with one launch, for work bound by kernel launches (the
// inference engine's decode step: a few hundred small kernels). Only CUDA ops may run inside a capture: no host
// copy, no synchronization, nothing on the CPU.
//
// The memory a graph's temporaries live in: a private pool of the caching allocator (core/cuda_allocator.h) that
// no other work is handed and empty_cache() keeps. Graphs sharing one pool must not run concurrently (replays on
// one stream never do). Destroy the graphs before their pool.
class GraphPool {
 public:
  explicit GraphPool(Device device);
  ~GraphPool();  // gives the pool's memory back (waits for the device)
  GraphPool(const GraphPool&) = delete;
  GraphPool& operator=(const GraphPool&) = delete;
  Device device() const { return device_; }
  const void* key() const { return this; }

 private:
  Device device_;
};

class OpGraph {
 public:
  // A CUDA build and a CUDA device.
  static bool supported(Device device);
  // Records `ops` without running them: on a capture stream of pool.device(), every allocation from `pool`. The
  // tensors the ops read and write keep their addresses, so each replay recomputes from their contents at that
  // time; tensors `ops` allocates and frees are the graph's temporaries. Aborts naming the CUDA error when an op
  // cannot be captured.
  OpGraph(GraphPool& pool, const std::function<void()>& ops);
  ~OpGraph();
  OpGraph(const OpGraph&) = delete;
  OpGraph& operator=(const OpGraph&) = delete;
  // Launches the recorded kernels on the device's current stream (asynchronous, like every op).
  void replay() const;
  // Kernel and copy nodes recorded.
  size_t nodes() const { return nodes_; }

 private:
  Device device_;
  void* exec_ = nullptr;  // cudaGraphExec_t
  size_t nodes_ = 0;
};

// ---- errors (ops.cpp) --------------------------------------------------------------------------------------
// Synchronizes `device` and returns (then clears) the first bad index a CUDA op recorded there (ids, targets,
// index or cu_seqlens out of range; repeated scatter_rows index), naming the op, entry and value. Always ok on the
// CPU, whose ops abort instead.
Status check_index_errors(Device device);

}  // namespace vlm::ops
