// The chunked LM-head loss (ops::lm_head_cross_entropy) against the unchunked composition of its parts (full [T, V]
// logits, cross-entropy forward/backward, linear backward) and against a float64 loss, for chunk sizes from 1 row
// to more than T; gradients skipped when undefined, dw accumulated, and bad arguments rejected by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

constexpr int kIgnore = -100;

struct HeadCase {
  int64_t rows, cols, vocab;
};
const HeadCase kCases[] = {{1, 1, 1}, {5, 8, 3}, {17, 33, 100}, {40, 64, 513}};

std::vector<int32_t> make_targets(int64_t rows, int64_t vocab, uint64_t seed) {
  Philox rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(rows));
  for (size_t i = 0; i < t.size(); ++i)
    t[i] = i % 4 == 2 ? kIgnore : static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(vocab)));
  return t;
}

// The unchunked composition: losses, dhidden (overwritten) and dw (+=) through full [T, V] logits.
void unchunked(Tensor& losses, Tensor& dhidden, Tensor& dw, const Tensor& hidden, const Tensor& w,
               const Tensor& targets, float dloss) {
  Tensor logits = Tensor::empty({hidden.dim(0), w.dim(0)}, DType::f32), none;
  ops::linear_forward(logits, hidden, w, none);
  ops::cross_entropy_forward_backward(losses, logits, logits, targets, dloss, kIgnore);
  ops::linear_backward(dhidden, dw, none, logits, hidden, w);
}

TEST(LmHeadCrossEntropy, ChunkedMatchesUnchunkedAndFloat64) {
  uint64_t seed = 1;
  for (const HeadCase& c : kCases) {
    const Tensor hidden = random_normal({c.rows, c.cols}, seed++);
    const Tensor w = random_normal({c.vocab, c.cols}, seed++, 1.f / std::sqrt(static_cast<float>(c.cols)));
    const std::vector<int32_t> target_values = make_targets(c.rows, c.vocab, seed++);
    const Tensor targets = i32_tensor(target_values);
    const Tensor dw0 = random_normal({c.vocab, c.cols}, seed++);
    const float dloss = 1.f / static_cast<float>(c.rows);
    Tensor ref_losses = nan_tensor({c.rows}), ref_dhidden = nan_tensor(hidden.shape()), ref_dw = dw0.clone();
    unchunked(ref_losses, ref_dhidden, ref_dw, hidden, w, targets, dloss);

    // The losses in float64, from the float64 logits.
    const Doubles h = to_doubles(hidden), wd = to_doubles(w);
    for (int64_t r = 0; r < c.rows; ++r) {
      const int32_t y = target_values[static_cast<size_t>(r)];
      if (y == kIgnore) {
        EXPECT_EQ(ref_losses.data<float>()[r], 0.f);
        continue;
      }
      Doubles logits(static_cast<size_t>(c.vocab));
      for (int64_t v = 0; v < c.vocab; ++v)
        for (int64_t k = 0; k < c.cols; ++k)
          logits[static_cast<size_t>(v)] +=
              h[static_cast<size_t>(r * c.cols + k)] * wd[static_cast<size_t>(v * c.cols + k)];
      const double m = *std::max_element(logits.begin(), logits.end());
      double z = 0;
      for (double l : logits) z += std::exp(l - m);
      EXPECT_NEAR(ref_losses.data<float>()[r], m + std::log(z) - logits[static_cast<size_t>(y)], 1e-5) << "row " << r;
    }

    for (int64_t chunk : {int64_t{1}, int64_t{3}, c.rows, c.rows + 5}) {
      SCOPED_TRACE(::testing::Message() << "T=" << c.rows << " C=" << c.cols << " V=" << c.vocab << " chunk=" << chunk);
      Tensor losses = nan_tensor({c.rows}), dhidden = nan_tensor(hidden.shape()), dw = dw0.clone();
      ops::lm_head_cross_entropy(losses, dhidden, dw, hidden, w, targets, dloss, kIgnore, chunk);
      // Row-wise results are the same computations; dw sums its rows in chunks instead of at once.
      EXPECT_TRUE(all_close(losses, ref_losses, 1e-6, 1e-6));
      EXPECT_TRUE(all_close(dhidden, ref_dhidden, 1e-5, 1e-6));
      EXPECT_TRUE(all_close(dw, ref_dw, 1e-5, 1e-6));

      // Losses only; then one gradient at a time (the other skipped).
      Tensor none, only_losses = nan_tensor({c.rows});
      ops::lm_head_cross_entropy(only_losses, none, none, hidden, w, targets, dloss, kIgnore, chunk);
      EXPECT_TRUE(all_close(only_losses, ref_losses, 1e-6, 1e-6));
      Tensor dh_only = nan_tensor(hidden.shape()), l2 = nan_tensor({c.rows});
      ops::lm_head_cross_entropy(l2, dh_only, none, hidden, w, targets, dloss, kIgnore, chunk);
      EXPECT_TRUE(all_close(dh_only, ref_dhidden, 1e-5, 1e-6));
      Tensor dw_only = dw0.clone(), l3 = nan_tensor({c.rows});
      ops::lm_head_cross_entropy(l3, none, dw_only, hidden, w, targets, dloss, kIgnore, chunk);
      EXPECT_TRUE(all_close(dw_only, ref_dw, 1e-5, 1e-6));
    }
  }
}

TEST(LmHeadCrossEntropy, IgnoredRowsContributeNothing) {
  const Tensor hidden = random_normal({6, 16}, 1), w = random_normal({50, 16}, 2, 0.25f);
  const Tensor targets = i32_tensor({kIgnore, kIgnore, kIgnore, kIgnore, kIgnore, kIgnore});
  Tensor losses = nan_tensor({6}), dhidden = nan_tensor({6, 16}), dw = Tensor::zeros({50, 16}, DType::f32);
  ops::lm_head_cross_entropy(losses, dhidden, dw, hidden, w, targets, 1.f, kIgnore, 4);
  EXPECT_TRUE(all_close(losses, Tensor::zeros({6}, DType::f32), 0, 0));
  EXPECT_TRUE(all_close(dhidden, Tensor::zeros({6, 16}, DType::f32), 0, 0));
  EXPECT_TRUE(all_close(dw, Tensor::zeros({50, 16}, DType::f32), 0, 0));
}

TEST(LmHeadCrossEntropy, BadArgumentsAbortNamingThem) {
  use_threadsafe_death_tests();
  const Tensor hidden = random_normal({3, 4}, 1), w = random_normal({5, 4}, 2), targets = i32_tensor({0, 1, 2});
  Tensor losses = nan_tensor({3}), none;
  EXPECT_DEATH(ops::lm_head_cross_entropy(losses, none, none, hidden, w, targets, 1.f, kIgnore, 0),
               "ops::lm_head_cross_entropy: chunk_rows is 0");
  const Tensor w_bad = random_normal({5, 3}, 3);
  EXPECT_DEATH(ops::lm_head_cross_entropy(losses, none, none, hidden, w_bad, targets, 1.f, kIgnore, 2),
               "ops::lm_head_cross_entropy: w is f32\\[5, 3\\]");
  Tensor dw_bad = nan_tensor({4, 5});
  EXPECT_DEATH(ops::lm_head_cross_entropy(losses, none, dw_bad, hidden, w, targets, 1.f, kIgnore, 2),
               "ops::lm_head_cross_entropy: dw is");
  // In the second chunk, named by its row in the whole batch.
  EXPECT_DEATH(ops::lm_head_cross_entropy(losses, none, none, hidden, w, i32_tensor({0, 1, 7}), 1.f, kIgnore, 2),
               "ops::lm_head_cross_entropy: targets\\[2\\] = 7 is outside \\[0, 5\\)");
}

}  // namespace
}  // namespace vlm::testing
