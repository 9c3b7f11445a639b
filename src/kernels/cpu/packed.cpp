// Ops on packed projections: the QKV split (+ RoPE on q and k) of one [T, (Hq + 2 Hkv) * D] projection (also with
// its k and v heads written straight into paged KV cache slots), and SwiGLU on one [T, 2I] gate/up projection. They
// run rope.cpp's and activation.cpp's serial building blocks row by row, so they equal slice + rope_forward and
// swiglu_forward on the halves bit for bit. Parallel over rows.
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"

namespace vlm::ops::cpu {

namespace {

// The q, k and v column blocks of a row layout: block p of row t starts at base[p] + t * stride[p] and holds
// heads[p] heads of head_dim values.
template <class P>
struct Blocks {
  P base[3];
  int64_t stride[3];
};

// dst block p of every row = src block p, with q and k (p < 2) rotated by RoPE when theta > 0 (direction +1:
// forward, -1: backward) and v copied. dst_kv_rows (or null: row t) names the dst row of token t's k and v blocks
// (the paged write's cache slots; negative: not written).
void qkv_exchange(const Blocks<float*>& dst, const Blocks<const float*>& src, const int64_t (&heads)[3],
                  const int32_t* positions, int64_t tokens, int64_t head_dim, float theta, float direction,
                  const int32_t* dst_kv_rows = nullptr) {
  const bool rotate = theta > 0.f;
  const int64_t half = head_dim / 2;
  const std::vector<float> inv_freq = rotate ? rope_inv_freq(head_dim, theta) : std::vector<float>{};
  const int64_t row = (heads[0] + heads[1] + heads[2]) * head_dim;
#pragma omp parallel if (tokens * row >= kParallelMinWork / 4)
  {
    std::vector<float> cos_a(static_cast<size_t>(half)), sin_a(static_cast<size_t>(half));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
      if (rotate) rope_angles(cos_a.data(), sin_a.data(), inv_freq.data(), half, positions[t], direction);
      for (int p = 0; p < 3; ++p) {
        const int64_t dst_row = p > 0 && dst_kv_rows != nullptr ? dst_kv_rows[t] : t;
        if (dst_row < 0) continue;
        const float* from = src.base[p] + t * src.stride[p];
        float* to = dst.base[p] + dst_row * dst.stride[p];
        if (rotate && p < 2) {
          rope_rotate_heads(to, from, heads[p], head_dim, cos_a.data(), sin_a.data());
        } else {
          std::copy(from, from + heads[p] * head_dim, to);
        }
      }
    }
  }
}

}  // namespace

void qkv_split_forward(float* q, float* k, float* v, const float* qkv, const int32_t* positions, int64_t tokens,
                       int64_t heads_q, int64_t heads_kv, int64_t head_dim, float theta) {
  const int64_t q_cols = heads_q * head_dim, kv_cols = heads_kv * head_dim, row = q_cols + 2 * kv_cols;
  const Blocks<float*> split{{q, k, v}, {q_cols, kv_cols, kv_cols}};
  const Blocks<const float*> packed{{qkv, qkv + q_cols, qkv + q_cols + kv_cols}, {row, row, row}};
  qkv_exchange(split, packed, {heads_q, heads_kv, heads_kv}, positions, tokens, head_dim, theta, 1.f);
}

void qkv_split_paged_write(float* q, float* k_cache, float* v_cache, const float* qkv, const int32_t* positions,
                           const int32_t* slots, int64_t tokens, int64_t num_slots, int64_t heads_q, int64_t heads_kv,
                           int64_t head_dim, float theta) {
  check_kv_slots("qkv_split_paged_write", slots, tokens, num_slots);
  const int64_t q_cols = heads_q * head_dim, kv_cols = heads_kv * head_dim, row = q_cols + 2 * kv_cols;
  const Blocks<float*> split{{q, k_cache, v_cache}, {q_cols, kv_cols, kv_cols}};
  const Blocks<const float*> packed{{qkv, qkv + q_cols, qkv + q_cols + kv_cols}, {row, row, row}};
  qkv_exchange(split, packed, {heads_q, heads_kv, heads_kv}, positions, tokens, head_dim, theta, 1.f, slots);
}

void qkv_split_backward(float* dqkv, const float* dq, const float* dk, const float* dv, const int32_t* positions,
                        int64_t tokens, int64_t heads_q, int64_t heads_kv, int64_t head_dim, float theta) {
  const int64_t q_cols = heads_q * head_dim, kv_cols = heads_kv * head_dim, row = q_cols + 2 * kv_cols;
  const Blocks<float*> packed{{dqkv, dqkv + q_cols, dqkv + q_cols + kv_cols}, {row, row, row}};
  const Blocks<const float*> split{{dq, dk, dv}, {q_cols, kv_cols, kv_cols}};
  qkv_exchange(packed, split, {heads_q, heads_kv, heads_kv}, positions, tokens, head_dim, theta, -1.f);
}

void swiglu_packed_forward(float* y, const float* gu, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMinWork / 8)
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gu + r * 2 * cols;
    swiglu_forward_span(y + r * cols, gate, gate + cols, cols);
  }
}

void swiglu_packed_backward(float* dgu, const float* dy, const float* gu, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMinWork / 8)
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gu + r * 2 * cols;
    float* dgate = dgu + r * 2 * cols;
    swiglu_backward_span(dgate, dgate + cols, dy + r * cols, gate, gate + cols, cols);
  }
}

}  // namespace vlm::ops::cpu
