// Every op vlm.cpp computes, declared once. Each has a plain CPU reference in cpu/ and (where supported) a fast
// CUDA version in cuda/; the functions here validate shapes/dtypes at the boundary and dispatch on the device of
// the output. Layout conventions:
//   * activations are row-major 2-D [T, C] (T = tokens or rows, C = channels) unless stated; linear, layernorm
//     and rmsnorm also take [..., C], flattening the leading dims into T;
//   * linear weights use the Hugging Face layout W [out_features, in_features];
//   * attention tensors are [T, H, D] with sequences packed back to back and delimited by cu_seqlens (i32 [B+1]).
// Gradient contract (llm.c's): backward functions OVERWRITE (=) activation gradients (dx, dq, ...) and ACCUMULATE
// (+=) into parameter gradients (dw, db, dtable, dpos). An undefined gradient tensor means "not needed": it is
// skipped. CPU tensors are f32 (ids/positions/cu_seqlens are i32).
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace vlm::ops {

// True when `op` (e.g. "attention_forward") has an implementation for `device`.
bool supports(const std::string& op, Device device);

// ---- GEMM --------------------------------------------------------------------------------------------------
// out[M, N] = alpha * op(a) @ op(b) + beta * out, op(x) = x or x^T. 2-D contiguous tensors.
void matmul(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha = 1.f,
            float beta = 0.f);
// Batched: a, b, out are 3-D with the same leading batch size; same semantics per batch entry.
void matmul_batched(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha = 1.f,
                    float beta = 0.f);

// y[T, out] = x[T, in] @ w[out, in]^T + b[out] (b may be undefined).
void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b);
// dx[T, in] = dy @ w (overwrite);  dw[out, in] += dy^T @ x;  db[out] += sum_t dy[t, :].
void linear_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w);

// ---- elementwise -------------------------------------------------------------------------------------------
void fill(Tensor& x, float value);
void scale(Tensor& x, float s);                              // x *= s
void add(Tensor& out, const Tensor& a, const Tensor& b);     // out = a + b (out may alias a or b)
void add_inplace(Tensor& a, const Tensor& b);                // a += b
// x[B*P, C] += pos[P, C] broadcast over B (rows of x are B blocks of P rows).
void add_rows_broadcast(Tensor& x, const Tensor& pos);
// dpos[P, C] += sum over the B blocks of dx[B*P, C].
void add_rows_broadcast_backward(Tensor& dpos, const Tensor& dx);

// ---- normalization (over the last dim C, rows independent) ------------------------------------------------
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

// ---- activations -------------------------------------------------------------------------------------------
// GELU with the tanh approximation (SigLIP's gelu_pytorch_tanh).
void gelu_tanh_forward(Tensor& y, const Tensor& x);
void gelu_tanh_backward(Tensor& dx, const Tensor& dy, const Tensor& x);
// y = silu(gate) * up, all [T, F].
void swiglu_forward(Tensor& y, const Tensor& gate, const Tensor& up);
void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dy, const Tensor& gate, const Tensor& up);

// ---- rotary position embedding (Llama / Hugging Face "rotate_half" layout) ----------------------------------
// In place on x [T, H, D]: for i < D/2, with a = pos[t] * theta^(-2i/D):
//   x'[i] = x[i] cos a - x[i + D/2] sin a;   x'[i + D/2] = x[i + D/2] cos a + x[i] sin a.
void rope_forward(Tensor& x, const Tensor& positions, float theta);
// In place on dx [T, H, D]: the transpose rotation (by -a).
void rope_backward(Tensor& dx, const Tensor& positions, float theta);

// ---- attention ---------------------------------------------------------------------------------------------
// Variable-length multi-head attention with grouped-query heads (Hq % Hkv == 0; q head h reads kv head h / (Hq/Hkv)).
//   q [Tq, Hq, D], k, v [Tk, Hkv, D]; cu_seqlens_q/k i32 [B+1] (sequence b is rows [cu[b], cu[b+1]));
//   out [Tq, Hq, D]; lse [Hq, Tq] f32 = log-sum-exp of the scaled scores of each query row.
// Causal masks are bottom-right aligned: in a sequence with Lq queries and Lk keys, query i sees keys
// j <= i + Lk - Lq. A query row that sees no key gets out = 0 and lse = -inf.
void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k, int max_seqlen_q, int max_seqlen_k,
                       float scale, bool causal);
// dq, dk, dv overwritten (dk/dv sum over the q heads that share a kv head).
void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& cu_seqlens_q,
                        const Tensor& cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, float scale, bool causal);

// ---- loss --------------------------------------------------------------------------------------------------
// losses[T] = logsumexp(logits[t]) - logits[t, targets[t]]; rows whose target == ignore_index get loss 0.
// targets i32 [T]; a target outside [0, V) other than ignore_index aborts naming the row.
void cross_entropy_forward(Tensor& losses, const Tensor& logits, const Tensor& targets, int ignore_index);
// dlogits[T, V] = (softmax(logits) - onehot(target)) * dloss (overwrite; zero rows for ignored targets).
// dlogits may alias logits (the logits are then overwritten by their gradient).
void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& targets, float dloss,
                            int ignore_index);

// ---- embeddings and data movement --------------------------------------------------------------------------
// out[T, C] = table[ids[t], :]; ids i32 [T] must lie in [0, V).
void embedding_forward(Tensor& out, const Tensor& table, const Tensor& ids);
// dtable[V, C] += scatter-add of dout rows at ids.
void embedding_backward(Tensor& dtable, const Tensor& dout, const Tensor& ids);
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
// out[index[i], :] = src[i, :] for each row i of src (index i32 [N], distinct, in range).
void scatter_rows(Tensor& out, const Tensor& src, const Tensor& index);
// out[i, :] = src[index[i], :] (the adjoint of scatter_rows).
void gather_rows(Tensor& out, const Tensor& src, const Tensor& index);

// ---- optimizer ---------------------------------------------------------------------------------------------
struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.f;
  int64_t step = 1;          // 1-based step count for the bias correction
  float grad_scale = 1.f;    // grads are multiplied by this first (e.g. the clipping factor)
};
// Decoupled weight decay (Loshchilov & Hutter): p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p).
// param, grad, m, v: same shape, f32.
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p);
// Sum of squares of every element of every tensor, accumulated in double, returned as f64.
double sum_of_squares(const std::vector<Tensor>& tensors);

}  // namespace vlm::ops
