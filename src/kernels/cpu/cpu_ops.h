// The CPU reference ops, on raw pointers and sizes, grouped by the file that defines them, cpu/<family>.cpp. The op
// boundary (ops/<family>.cpp) validates shapes, dtypes, contiguity and devices before calling these; they only check
// data-dependent invariants (ids, targets, cu_seqlens in range) and abort naming the op. All tensors are contiguous
// row-major f32 (ids, positions, cu_seqlens: i32).
//
// Determinism: every output element is computed by exactly one thread in an order fixed by the shapes alone, so
// the results are bit-identical across calls and across OpenMP thread counts. The GEMMs are OpenBLAS's, which is
// deterministic for a fixed thread count. Gradient contracts are those of kernels/ops.h (dx overwrite, dw/db +=); a
// null gradient pointer means "not needed".
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/adamw_scalars.h"

namespace vlm::ops::cpu {

// ---- gemm.cpp ----------------------------------------------------------------------------------------------
// c[m, n] = alpha * op(a) @ op(b) + beta * c; op(a) is [m, k] (a stored [k, m] when trans_a), op(b) is [k, n]
// (b stored [n, k] when trans_b). beta == 0 ignores the old contents of c (NaN included).
void gemm(float* c, const float* a, const float* b, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b,
          float alpha, float beta);
// `batch` independent gemms over consecutive [m, n], op(a), op(b) blocks.
void gemm_batched(float* c, const float* a, const float* b, int64_t batch, int64_t m, int64_t n, int64_t k,
                  bool trans_a, bool trans_b, float alpha, float beta);
// y[rows, out] = x[rows, in] @ w[out, in]^T + bias[out] (bias may be null).
void linear_forward(float* y, const float* x, const float* w, const float* bias, int64_t rows, int64_t in, int64_t out);
// dx = dy @ w;  dw += dy^T @ x;  db += column sums of dy. Any of dx, dw, db may be null.
void linear_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w, int64_t rows,
                     int64_t in, int64_t out);

// ---- elementwise.cpp ---------------------------------------------------------------------------------------
void fill(float* x, int64_t n, float value);
void scale(float* x, int64_t n, float s);
void add(float* out, const float* a, const float* b, int64_t n);  // out may alias a or b
void add_inplace(float* a, const float* b, int64_t n);
// x[blocks * rows, cols] += pos[rows, cols] per block.
void add_rows_broadcast(float* x, const float* pos, int64_t blocks, int64_t rows, int64_t cols);
// dpos[rows, cols] += sum over blocks of dx[blocks * rows, cols].
void add_rows_broadcast_backward(float* dpos, const float* dx, int64_t blocks, int64_t rows, int64_t cols);

// ---- norm.cpp ----------------------------------------------------------------------------------------------
// Rows of length `cols`. bias may be null (no bias).
void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* w, const float* bias,
                       int64_t rows, int64_t cols, float eps);
void layernorm_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                        const float* mean, const float* rstd, int64_t rows, int64_t cols);
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t rows, int64_t cols, float eps);
void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd,
                      int64_t rows, int64_t cols);

// ---- activation.cpp ----------------------------------------------------------------------------------------
void gelu_tanh_forward(float* y, const float* x, int64_t n);
void gelu_tanh_backward(float* dx, const float* dy, const float* x, int64_t n);
void swiglu_forward(float* y, const float* gate, const float* up, int64_t n);
// Either of dgate, dup may be null.
void swiglu_backward(float* dgate, float* dup, const float* dy, const float* gate, const float* up, int64_t n);
// The same math on one thread (no OpenMP inside): the kernels the two ops above run on chunks, and packed.cpp on
// rows of the packed gate/up projection.
void swiglu_forward_span(float* y, const float* gate, const float* up, int64_t n);
void swiglu_backward_span(float* dgate, float* dup, const float* dy, const float* gate, const float* up, int64_t n);

// ---- rope.cpp ----------------------------------------------------------------------------------------------
// In place on x [tokens, heads, head_dim] (head_dim even); backward rotates by the negated angle.
void rope_forward(float* x, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim, float theta);
void rope_backward(float* dx, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim, float theta);
// Their building blocks (serial; packed.cpp rotates with them too). inv_freq[i] = f32(1 / theta^(2i/D)), i < D/2,
// computed in double.
std::vector<float> rope_inv_freq(int64_t head_dim, float theta);
// cos_a[i] = cos(a), sin_a[i] = direction * sin(a) with a = f32(position) * inv_freq[i] in f32, for i < half.
void rope_angles(float* cos_a, float* sin_a, const float* inv_freq, int64_t half, int32_t position, float direction);
// dst = src rotated (rotate_half layout) by the table, for `heads` consecutive heads of head_dim values each; dst may
// equal src (in place) but must not overlap it otherwise.
void rope_rotate_heads(float* dst, const float* src, int64_t heads, int64_t head_dim, const float* cos_a,
                       const float* sin_a);

// ---- packed.cpp --------------------------------------------------------------------------------------------
// The packed QKV projection qkv [tokens, (heads_q + 2 heads_kv) * head_dim] split into q [tokens, heads_q, head_dim],
// k and v [tokens, heads_kv, head_dim], with RoPE on q and k when theta > 0 (theta == 0: no rotation, positions may
// be null).
void qkv_split_forward(float* q, float* k, float* v, const float* qkv, const int32_t* positions, int64_t tokens,
                       int64_t heads_q, int64_t heads_kv, int64_t head_dim, float theta);
// q as qkv_split_forward; the k and v heads of row t (k rotated) go to row slots[t] of k_cache, v_cache
// [num_slots, heads_kv * head_dim] (slot -1: not written), as paged_kv_write copies them. Slots are checked first
// (check_kv_slots). Equals qkv_split_forward + paged_kv_write bit for bit.
void qkv_split_paged_write(float* q, float* k_cache, float* v_cache, const float* qkv, const int32_t* positions,
                           const int32_t* slots, int64_t tokens, int64_t num_slots, int64_t heads_q, int64_t heads_kv,
                           int64_t head_dim, float theta);
// dqkv = [rope_backward(dq) | rope_backward(dk) | dv] (no rotation when theta == 0).
void qkv_split_backward(float* dqkv, const float* dq, const float* dk, const float* dv, const int32_t* positions,
                        int64_t tokens, int64_t heads_q, int64_t heads_kv, int64_t head_dim, float theta);
// y [rows, cols] = silu(gate) * up for gu [rows, 2 * cols] (gate columns, then up columns).
void swiglu_packed_forward(float* y, const float* gu, int64_t rows, int64_t cols);
// dgu [rows, 2 * cols] = [dgate | dup].
void swiglu_packed_backward(float* dgu, const float* dy, const float* gu, int64_t rows, int64_t cols);

// ---- attention.cpp -----------------------------------------------------------------------------------------
// Inputs of one varlen attention call (see ops::attention_forward for the semantics).
struct AttentionParams {
  const float* q = nullptr;                // [tokens_q, heads_q, head_dim]
  const float* k = nullptr;                // [tokens_k, heads_kv, head_dim]
  const float* v = nullptr;                // [tokens_k, heads_kv, head_dim]
  const int32_t* cu_seqlens_q = nullptr;   // [batch + 1], 0 = cu[0] <= cu[1] <= ... <= cu[batch] = tokens_q
  const int32_t* cu_seqlens_k = nullptr;   // [batch + 1], same for the keys
  int64_t batch = 0;                       // number of sequences
  int64_t tokens_q = 0, tokens_k = 0;      // packed rows
  int64_t heads_q = 0, heads_kv = 0;       // heads_q % heads_kv == 0
  int64_t head_dim = 0;                    // any size
  int max_seqlen_q = 0, max_seqlen_k = 0;  // upper bounds on the per-sequence lengths (checked)
  float scale = 1.f;                       // multiplies q . k
  bool causal = false;                     // bottom-right aligned
};
// out [tokens_q, heads_q, head_dim]; lse [heads_q, tokens_q].
// Aborts naming op, name and the entry unless 0 = cu[0] <= ... <= cu[batch] = tokens with each length <= max_seqlen.
void check_cu_seqlens(const char* op, const char* name, const int32_t* cu, int64_t batch, int64_t tokens,
                      int max_seqlen);
void attention_forward(float* out, float* lse, const AttentionParams& p);
// dq like q, dk/dv like k (all overwritten; any may be null).
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                        const AttentionParams& p);

// ---- paged_attention.cpp -----------------------------------------------------------------------------------
// Aborts naming op and the entry unless every slots[t] (t < tokens) lies in [-1, num_slots).
void check_kv_slots(const char* op, const int32_t* slots, int64_t tokens, int64_t num_slots);
// Row t of k, v [tokens, row] (row = heads_kv * head_dim) into cache row slots[t] of k_cache, v_cache
// [num_slots, row]; -1 skips the row; any other slot outside [0, num_slots) aborts naming the op and the entry.
void paged_kv_write(float* k_cache, float* v_cache, const float* k, const float* v, const int32_t* slots,
                    int64_t tokens, int64_t num_slots, int64_t row);
// Inputs of one paged attention call (see ops::paged_attention for the semantics).
struct PagedAttentionParams {
  const float* q = nullptr;                // [tokens_q, heads_q, head_dim]
  const float* k_cache = nullptr;          // [num_blocks, block_size, heads_kv, head_dim]
  const float* v_cache = nullptr;          // same
  const int32_t* block_tables = nullptr;   // [batch, max_blocks_per_seq]
  const int32_t* context_lens = nullptr;   // [batch]
  const int32_t* cu_seqlens_q = nullptr;   // [batch + 1]
  int64_t batch = 0;
  int64_t tokens_q = 0;
  int64_t heads_q = 0, heads_kv = 0, head_dim = 0;
  int64_t num_blocks = 0, block_size = 0, max_blocks_per_seq = 0;
  int max_seqlen_q = 0, max_context_len = 0;  // upper bounds (checked)
  float scale = 1.f;
};
// Aborts naming op and the entry unless the cu_seqlens, context lengths and the block ids they reach are valid (the
// checks listed at ops::paged_attention).
void check_paged_attention(const char* op, const PagedAttentionParams& p);
// out [tokens_q, heads_q, head_dim]; checks first.
void paged_attention(float* out, const PagedAttentionParams& p);

// ---- loss.cpp ----------------------------------------------------------------------------------------------
void argmax_rows(int32_t* ids, const float* logits, int64_t rows, int64_t vocab, int32_t banned);
// argmax of logits * inv_temperature[r] + gumbel::noise(keys[r], v) per row (kernels/gumbel.h); inv_temperature 0:
// argmax_rows's pick.
void gumbel_argmax_rows(int32_t* ids, const float* logits, const float* inv_temperature, const int64_t* keys,
                        int64_t rows, int64_t vocab, int32_t banned);
void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                           int ignore_index);
// dlogits may equal logits (in place).
void cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets, float dloss, int64_t rows,
                            int64_t vocab, int ignore_index);

// ---- embedding.cpp -----------------------------------------------------------------------------------------
void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t tokens, int64_t vocab, int64_t cols);
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t tokens, int64_t vocab,
                        int64_t cols);
// out[index[i], :] = src[i, :] for i < n; out has out_rows rows.
void scatter_rows(float* out, const float* src, const int32_t* index, int64_t n, int64_t out_rows, int64_t cols);
// out[i, :] = src[index[i], :] for i < n; src has src_rows rows.
void gather_rows(float* out, const float* src, const int32_t* index, int64_t n, int64_t src_rows, int64_t cols);

// ---- layout.cpp --------------------------------------------------------------------------------------------
// images [batch, channels, height, width] <-> patches [batch * (height/p) * (width/p), channels * p * p].
void image_to_patches(float* patches, const float* images, int64_t batch, int64_t channels, int64_t height,
                      int64_t width, int64_t patch);
void image_to_patches_backward(float* dimages, const float* dpatches, int64_t batch, int64_t channels, int64_t height,
                               int64_t width, int64_t patch);
// x [batch, side * side, cols] <-> y [batch, (side/r)^2, cols * r * r].
void pixel_shuffle_forward(float* y, const float* x, int64_t batch, int64_t side, int64_t cols, int64_t factor);
void pixel_shuffle_backward(float* dx, const float* dy, int64_t batch, int64_t side, int64_t cols, int64_t factor);

// ---- quant.cpp ---------------------------------------------------------------------------------------------
// fp8 E4M3 blocks of 128 (kernels/fp8_e4m3.h): q [n], scales [ceil(n / 128)] from x [n], and back.
void quantize_fp8_blocks(uint8_t* q, float* scales, const float* x, int64_t n);
void dequantize_fp8_blocks(float* x, const uint8_t* q, const float* scales, int64_t n);

// ---- optimizer.cpp -----------------------------------------------------------------------------------------
// One AdamW step over n elements (see ops::adamw_step; the scalars of kernels/adamw_scalars.h, clipping included).
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWScalars& s);
// sum_i x[i]^2 in double, in fixed-size chunks summed in order (independent of the thread count).
double sum_of_squares(const float* x, int64_t n);

}  // namespace vlm::ops::cpu
