// Small helpers shared by the CPU ops: fixed-order reductions, the OpenMP size threshold and one attention row.
// Determinism: every reduction here sums in an order fixed by the data size alone (8 interleaved partial sums,
// combined pairwise), never by the thread count, so the same inputs always give the same bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace vlm::ops::cpu {

// Below this many scalar operations an op runs on one thread: OpenMP's fork/join costs more than it saves.
constexpr int64_t kParallelMinWork = int64_t{1} << 15;

// sum_{i < n} f(i), accumulated in 8 interleaved float lanes (vectorizable, order fixed by n).
template <class F>
inline float reduce8(int64_t n, F f) {
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += f(i + l);
  for (int l = 0; i < n; ++i, ++l) acc[l] += f(i);
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// sum_i a[i] * b[i].
inline float dot(const float* a, const float* b, int64_t n) {
  return reduce8(n, [&](int64_t i) { return a[i] * b[i]; });
}

// y[i] += alpha * x[i].
inline void axpy(float* __restrict y, const float* __restrict x, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// One query row of softmax attention over n >= 1 keys: out[dim] = sum_j softmax_j(scale q . key(j)) value(j), with
// the max subtracted, summed in key order. Returns the row's log-sum-exp. key(j), value(j): pointers to row j;
// probs (>= n floats) and acc (dim floats) are scratch. Shared by attention_forward and paged_attention, so a
// paged cache holding a sequence's keys in order gives the same bits as the packed op.
template <class KeyAt, class ValueAt>
float attend_row(float* out, const float* q, KeyAt key, ValueAt value, int64_t n, int64_t dim, float scale,
                 float* probs, float* acc) {
  float row_max = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    probs[j] = scale * dot(q, key(j), dim);
    row_max = std::max(row_max, probs[j]);
  }
  float row_sum = 0.f;
  for (int64_t j = 0; j < n; ++j) {
    probs[j] = std::exp(probs[j] - row_max);
    row_sum += probs[j];
  }
  std::fill(acc, acc + dim, 0.f);
  for (int64_t j = 0; j < n; ++j) axpy(acc, value(j), probs[j], dim);
  const float inv_sum = 1.f / row_sum;
  for (int64_t d = 0; d < dim; ++d) out[d] = acc[d] * inv_sum;
  return row_max + std::log(row_sum);
}

}  // namespace vlm::ops::cpu
