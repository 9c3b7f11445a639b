// Cross-entropy against a float64 log-sum-exp and finite differences; ignored rows, in-place backward, bad targets;
// argmax_rows (ties, the banned id, NaN); gumbel_argmax_rows (argmax at zero inverse temperature, softmax
// frequencies at a temperature, the same pick for the same key).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

constexpr int kIgnore = -100;

Doubles cross_entropy_ref(const Doubles& logits, const std::vector<int32_t>& targets, int64_t vocab) {
  Doubles losses(targets.size(), 0.0);
  for (size_t t = 0; t < targets.size(); ++t) {
    if (targets[t] == kIgnore) continue;
    const double* row = logits.data() + t * static_cast<size_t>(vocab);
    const double m = *std::max_element(row, row + vocab);
    double z = 0;
    for (int64_t v = 0; v < vocab; ++v) z += std::exp(row[v] - m);
    losses[t] = m + std::log(z) - row[targets[t]];
  }
  return losses;
}

std::vector<int32_t> make_targets(int64_t rows, int64_t vocab, uint64_t seed) {
  Philox rng(seed);
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (size_t t = 0; t < targets.size(); ++t)
    targets[t] = (t % 3 == 1) ? kIgnore : static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(vocab)));
  return targets;
}

struct LossCase {
  int64_t rows, vocab;
  float spread;  // std of the logits
};
const LossCase kCases[] = {{1, 1, 1.f}, {3, 17, 1.f}, {17, 33, 5.f}, {4, 1000, 2.f}, {64, 129, 30.f}};

TEST(CrossEntropy, ForwardMatchesFloat64Reference) {
  uint64_t seed = 1;
  for (const LossCase& c : kCases) {
    SCOPED_TRACE(::testing::Message() << c.rows << "x" << c.vocab);
    Tensor logits = random_normal({c.rows, c.vocab}, seed++, c.spread);
    const std::vector<int32_t> targets = make_targets(c.rows, c.vocab, seed++);
    Tensor losses = nan_tensor({c.rows});
    ops::cross_entropy_forward(losses, logits, i32_tensor(targets), kIgnore);
    const Doubles expect = cross_entropy_ref(to_doubles(logits), targets, c.vocab);
    EXPECT_TRUE(all_close(losses, from_doubles(expect, losses.shape()), 1e-5, 1e-5));
    for (size_t t = 0; t < targets.size(); ++t) {
      if (targets[t] == kIgnore) {
        EXPECT_EQ(losses.data<float>()[t], 0.f);
      }
    }
  }
}

TEST(CrossEntropy, StableForLargeLogits) {
  // exp(1000) overflows f32 and f64 alike: only a max-subtracted implementation stays finite.
  Tensor logits = random_normal({5, 50}, 7, 3.f);
  for (int64_t i = 0; i < logits.numel(); ++i) logits.data<float>()[i] += (i % 2 ? 1000.f : -1000.f) + 500.f;
  const std::vector<int32_t> targets = {0, 1, 49, 2, kIgnore};
  Tensor losses = nan_tensor({5}), dlogits = nan_tensor({5, 50});
  ops::cross_entropy_forward(losses, logits, i32_tensor(targets), kIgnore);
  ops::cross_entropy_backward(dlogits, logits, i32_tensor(targets), 1.f, kIgnore);
  EXPECT_TRUE(all_close(losses, from_doubles(cross_entropy_ref(to_doubles(logits), targets, 50), {5}), 1e-4, 1e-3));
  EXPECT_TRUE(all_close(dlogits, dlogits, 0, 0));  // all finite
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferencesAndMayAliasLogits) {
  uint64_t seed = 100;
  for (const LossCase& c : kCases) {
    if (c.rows * c.vocab > 600) continue;
    SCOPED_TRACE(::testing::Message() << c.rows << "x" << c.vocab);
    Tensor logits = random_normal({c.rows, c.vocab}, seed++, c.spread);
    const std::vector<int32_t> targets = make_targets(c.rows, c.vocab, seed++);
    const float dloss = 0.37f;
    // Objective: dloss * sum_t losses[t].
    const RefFn ref = [&](const std::vector<Doubles>& v) { return cross_entropy_ref(v[0], targets, c.vocab); };
    const Doubles g = numeric_grad(ref, {to_doubles(logits)}, 0, Doubles(static_cast<size_t>(c.rows), dloss));
    Tensor dlogits = nan_tensor(logits.shape());
    ops::cross_entropy_backward(dlogits, logits, i32_tensor(targets), dloss, kIgnore);
    EXPECT_TRUE(all_close(dlogits, from_doubles(g, logits.shape()), 1e-4, 1e-5));

    Tensor in_place = logits.clone();
    ops::cross_entropy_backward(in_place, in_place, i32_tensor(targets), dloss, kIgnore);
    EXPECT_TRUE(bitwise_equal(in_place, dlogits));
  }
}

TEST(CrossEntropy, TargetOutOfRangeAbortsNamingTheRow) {
  use_threadsafe_death_tests();
  Tensor logits = random_normal({3, 4}, 1), losses = nan_tensor({3}), dlogits = nan_tensor({3, 4});
  EXPECT_DEATH(ops::cross_entropy_forward(losses, logits, i32_tensor({0, 4, 1}), kIgnore),
               "ops::cross_entropy_forward: targets\\[1\\] = 4 is outside \\[0, 4\\)");
  EXPECT_DEATH(ops::cross_entropy_backward(dlogits, logits, i32_tensor({0, 1, -1}), 1.f, kIgnore),
               "ops::cross_entropy_backward: targets\\[2\\] = -1");
}

std::vector<int32_t> ids_of(const Tensor& t) { return {t.data<int32_t>(), t.data<int32_t>() + t.numel()}; }

TEST(ArgmaxRows, FirstMaximumSkippingBannedAndNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const Tensor logits = Tensor::from_vector(std::vector<float>{1, 3, 3, 2,        // tie: the lower index
                                                              5, 4, nan, 4,      // 5 at 0 is banned
                                                              nan, -1, nan, -2,  // NaN never wins
                                                              -inf, -inf, -inf, -inf, 2, 9, 9, 7},
                                            {5, 4});
  Tensor ids = i32_tensor({-7, -7, -7, -7, -7});
  ops::argmax_rows(ids, logits, /*banned=*/0);
  EXPECT_EQ(ids_of(ids), (std::vector<int32_t>{1, 1, 1, 1, 1}));
  ops::argmax_rows(ids, logits, /*banned=*/-1);
  EXPECT_EQ(ids_of(ids), (std::vector<int32_t>{1, 0, 1, 0, 1}));
  const Tensor only_banned = Tensor::from_vector(std::vector<float>{nan, 3}, {1, 2});
  Tensor one = i32_tensor({-7});
  ops::argmax_rows(one, only_banned, 1);
  EXPECT_EQ(ids_of(one), std::vector<int32_t>{0});  // nothing eligible: 0
}

TEST(ArgmaxRows, ShapeErrorsNameTheTensor) {
  use_threadsafe_death_tests();
  Tensor ids = i32_tensor({0, 0});
  EXPECT_DEATH(ops::argmax_rows(ids, random_normal({3, 4}, 1), -1), "ops::argmax_rows: ids");
  EXPECT_DEATH(ops::argmax_rows(ids, random_normal({8}, 1), -1), "ops::argmax_rows: logits");
}

Tensor i64_tensor(const std::vector<int64_t>& values) {
  return Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
}

TEST(GumbelArgmaxRows, ZeroInverseTemperatureIsArgmax) {
  const Tensor logits = random_normal({6, 50}, 3, 2.f);
  Tensor want = i32_tensor(std::vector<int32_t>(6, -7)), got = i32_tensor(std::vector<int32_t>(6, -7));
  ops::argmax_rows(want, logits, 7);
  ops::gumbel_argmax_rows(got, logits, Tensor::full({6}, 0.f), i64_tensor({1, 2, 3, 4, 5, 6}), 7);
  EXPECT_EQ(ids_of(got), ids_of(want));
}

// Over many keys the picks follow softmax(x / T): each token's frequency within 5 standard deviations of its
// probability (20000 draws), the banned token and NaN never picked, and a key always gives the same pick.
TEST(GumbelArgmaxRows, SamplesSoftmaxAtTheTemperature) {
  const std::vector<float> x = {2.f, 1.f, 0.5f, 0.f, -1.f, std::numeric_limits<float>::quiet_NaN(), 3.f};
  const int64_t vocab = static_cast<int64_t>(x.size()), draws = 20000;
  const int32_t banned = 6;
  for (float temperature : {0.7f, 1.f, 2.f}) {
    SCOPED_TRACE(::testing::Message() << "T " << temperature);
    std::vector<float> rows;
    std::vector<int64_t> keys;
    for (int64_t d = 0; d < draws; ++d) {
      rows.insert(rows.end(), x.begin(), x.end());
      keys.push_back(static_cast<int64_t>(d * 7919 + 11));
    }
    const Tensor logits = Tensor::from_vector(rows, {draws, vocab});
    Tensor ids = i32_tensor(std::vector<int32_t>(static_cast<size_t>(draws), -7));
    ops::gumbel_argmax_rows(ids, logits, Tensor::full({draws}, 1.f / temperature), i64_tensor(keys), banned);
    std::vector<double> p(static_cast<size_t>(vocab), 0.0), count(static_cast<size_t>(vocab), 0.0);
    double z = 0;
    for (int v = 0; v < 5; ++v) z += std::exp(x[static_cast<size_t>(v)] / temperature);
    for (int v = 0; v < 5; ++v) p[static_cast<size_t>(v)] = std::exp(x[static_cast<size_t>(v)] / temperature) / z;
    for (int64_t d = 0; d < draws; ++d) ++count[static_cast<size_t>(ids.data<int32_t>()[d])];
    for (int v = 0; v < vocab; ++v) {
      const double pv = p[static_cast<size_t>(v)], sd = std::sqrt(pv * (1 - pv) / static_cast<double>(draws));
      EXPECT_NEAR(count[static_cast<size_t>(v)] / static_cast<double>(draws), pv, 5 * sd + 1e-12) << "token " << v;
    }
    Tensor again = i32_tensor(std::vector<int32_t>(static_cast<size_t>(draws), -7));
    ops::gumbel_argmax_rows(again, logits, Tensor::full({draws}, 1.f / temperature), i64_tensor(keys), banned);
    EXPECT_EQ(ids_of(again), ids_of(ids));
  }
}

TEST(GumbelArgmaxRows, BadArgumentsNameTheTensor) {
  use_threadsafe_death_tests();
  Tensor ids = i32_tensor({0, 0});
  const Tensor logits = random_normal({2, 4}, 1);
  EXPECT_DEATH(ops::gumbel_argmax_rows(ids, logits, Tensor::full({3}, 1.f), i64_tensor({1, 2}), -1),
               "ops::gumbel_argmax_rows: inv_temperature");
  EXPECT_DEATH(ops::gumbel_argmax_rows(ids, logits, Tensor::full({2}, 1.f), i32_tensor({1, 2}), -1),
               "ops::gumbel_argmax_rows: keys");
  EXPECT_DEATH(ops::gumbel_argmax_rows(ids, logits, Tensor::full({2}, -1.f), i64_tensor({1, 2}), -1),
               "ops::gumbel_argmax_rows: inv_temperature\\[0\\] = -1");
}

}  // namespace
}  // namespace vlm::testing
