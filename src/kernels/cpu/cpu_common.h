// Small helpers shared by the CPU ops: fixed-order reductions and the OpenMP size threshold.
// Determinism: every reduction here sums in an order fixed by the data size alone (8 interleaved partial sums,
// combined pairwise), never by the thread count, so the same inputs always give the same bits.
#pragma once

#include <cstdint>

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

}  // namespace vlm::ops::cpu
