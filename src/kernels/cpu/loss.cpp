// Cross-entropy over the vocabulary, one row per token, max-subtracted with the sum of exponentials in double.
#include <algorithm>
#include <cmath>

#include "core/status.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/gumbel.h"

namespace vlm::ops::cpu {

namespace {

void check_targets(const char* op, const int32_t* targets, int64_t rows, int64_t vocab, int ignore_index) {
  for (int64_t t = 0; t < rows; ++t) {
    const int32_t y = targets[t];
    VLM_CHECK(y == ignore_index || (y >= 0 && y < vocab), "ops::", op, ": targets[", t, "] = ", y, " is outside [0, ",
              vocab, ") and is not ignore_index ", ignore_index);
  }
}

// log(sum_v exp(row[v])) = max + log(sum_v exp(row[v] - max)), the sum in double.
double row_logsumexp(const float* row, int64_t vocab) {
  float row_max = row[0];
  for (int64_t v = 1; v < vocab; ++v) row_max = std::max(row_max, row[v]);
  double sum = 0.0;
  for (int64_t v = 0; v < vocab; ++v) sum += static_cast<double>(std::exp(row[v] - row_max));
  return static_cast<double>(row_max) + std::log(sum);
}

// The id of row's largest score, x * s + gumbel::noise(key, v) (s > 0) or x (s == 0): the first of equal maxima,
// `banned` and NaN never chosen, 0 when nothing else is left.
int32_t pick_row(const float* row, int64_t vocab, int32_t banned, float s, uint64_t key) {
  int64_t best = -1;
  float best_score = 0.f;
  for (int64_t v = 0; v < vocab; ++v) {
    if (v == banned || std::isnan(row[v])) continue;
    const float score = s > 0.f ? row[v] * s + gumbel::noise(key, v) : row[v];
    if (best < 0 || score > best_score) {
      best = v;
      best_score = score;
    }
  }
  return static_cast<int32_t>(std::max<int64_t>(best, 0));
}
}  // namespace

void argmax_rows(int32_t* ids, const float* logits, int64_t rows, int64_t vocab, int32_t banned) {
#pragma omp parallel for schedule(static) if (rows * vocab >= kParallelMinWork)
  for (int64_t r = 0; r < rows; ++r) ids[r] = pick_row(logits + r * vocab, vocab, banned, 0.f, 0);
}

void gumbel_argmax_rows(int32_t* ids, const float* logits, const float* inv_temperature, const int64_t* keys,
                        int64_t rows, int64_t vocab, int32_t banned) {
#pragma omp parallel for schedule(static) if (rows * vocab >= kParallelMinWork / 8)
  for (int64_t r = 0; r < rows; ++r)
    ids[r] = pick_row(logits + r * vocab, vocab, banned, inv_temperature[r], static_cast<uint64_t>(keys[r]));
}

void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                           int ignore_index) {
  check_targets("cross_entropy_forward", targets, rows, vocab, ignore_index);
#pragma omp parallel for schedule(static) if (rows * vocab >= kParallelMinWork / 4)
  for (int64_t t = 0; t < rows; ++t) {
    const int32_t y = targets[t];
    if (y == ignore_index) {
      losses[t] = 0.f;
      continue;
    }
    const float* row = logits + t * vocab;
    losses[t] = static_cast<float>(row_logsumexp(row, vocab) - static_cast<double>(row[y]));
  }
}

void cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets, float dloss, int64_t rows,
                            int64_t vocab, int ignore_index) {
  check_targets("cross_entropy_backward", targets, rows, vocab, ignore_index);
#pragma omp parallel for schedule(static) if (rows * vocab >= kParallelMinWork / 4)
  for (int64_t t = 0; t < rows; ++t) {
    const int32_t y = targets[t];
    float* drow = dlogits + t * vocab;
    if (y == ignore_index) {
      std::fill(drow, drow + vocab, 0.f);
      continue;
    }
    const float* row = logits + t * vocab;  // may be drow itself: each element is read before it is written
    const float lse = static_cast<float>(row_logsumexp(row, vocab));
    for (int64_t v = 0; v < vocab; ++v) drow[v] = std::exp(row[v] - lse) * dloss;
    drow[y] -= dloss;
  }
}

}  // namespace vlm::ops::cpu
