// The sampler: greedy, the filters, penalties, seeded reproducibility, log-probabilities, and that sampling at a
// temperature follows the softmax distribution (a chi-square bound over many draws).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "infer/sampler.h"

namespace vlm::infer {
namespace {

SampledToken run(std::vector<float> logits, const SamplingParams& p, uint64_t seed = 1,
                 const std::vector<int32_t>& prompt = {}, const std::vector<int32_t>& output = {},
                 int32_t banned = -1) {
  Philox rng(seed, 0);
  return sample_token(logits.data(), static_cast<int64_t>(logits.size()), p, prompt, output, banned, rng);
}

TEST(Sampler, GreedyTakesTheFirstLargestAndSkipsTheBannedToken) {
  SamplingParams p;
  EXPECT_EQ(run({0.f, 3.f, 1.f, 3.f}, p).id, 1);
  EXPECT_EQ(run({0.f, 3.f, 1.f, 3.f}, p, 1, {}, {}, 1).id, 3);
}

TEST(Sampler, LogprobsAreTheModelsLogSoftmax) {
  SamplingParams p;
  p.logprobs = 2;
  const std::vector<float> l = {1.f, 2.f, 0.5f};
  const double z = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(0.5));
  const SampledToken t = run(l, p);
  EXPECT_NEAR(t.logprob, 2.0 - z, 1e-6);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].first, 1);
  EXPECT_EQ(t.top[1].first, 0);
  EXPECT_NEAR(t.top[1].second, 1.0 - z, 1e-6);
}

TEST(Sampler, FiltersThatKeepOneTokenAreGreedy) {
  const std::vector<float> l = {0.3f, 0.1f, 2.0f, 1.9f, -1.f};
  for (uint64_t seed = 0; seed < 50; ++seed) {
    SamplingParams k;
    k.temperature = 1.f;
    k.top_k = 1;
    EXPECT_EQ(run(l, k, seed).id, 2);
    SamplingParams tp;
    tp.temperature = 1.f;
    tp.top_p = 1e-4f;
    EXPECT_EQ(run(l, tp, seed).id, 2);
    SamplingParams mp;
    mp.temperature = 1.f;
    mp.min_p = 0.99f;
    EXPECT_EQ(run(l, mp, seed).id, 2);
  }
}

TEST(Sampler, TopKAndTopPOnlyDrawWhatTheyKeep) {
  const std::vector<float> l = {3.f, 2.9f, 2.8f, -5.f, -6.f, 0.f};
  for (uint64_t seed = 0; seed < 200; ++seed) {
    SamplingParams k;
    k.temperature = 2.f;
    k.top_k = 3;
    EXPECT_LE(run(l, k, seed).id, 2);
    SamplingParams tp;
    tp.temperature = 1.f;
    tp.top_p = 0.9f;  // the first three hold > 90% of the mass
    EXPECT_LE(run(l, tp, seed).id, 2);
  }
}

TEST(Sampler, SameSeedSameTokensDifferentSeedsDiffer) {
  std::vector<float> l(64);
  for (size_t i = 0; i < l.size(); ++i) l[i] = std::sin(static_cast<float>(i));
  SamplingParams p;
  p.temperature = 1.5f;
  std::vector<int32_t> a, b, c;
  Philox ra(42, 0), rb(42, 0), rc(43, 0);
  for (int i = 0; i < 30; ++i) {
    std::vector<float> x = l, y = l, z = l;
    a.push_back(sample_token(x.data(), 64, p, {}, {}, -1, ra).id);
    b.push_back(sample_token(y.data(), 64, p, {}, {}, -1, rb).id);
    c.push_back(sample_token(z.data(), 64, p, {}, {}, -1, rc).id);
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Sampler, DrawsFollowTheSoftmaxAtTheTemperature) {
  const std::vector<float> l = {1.f, 0.f, -1.f, 0.5f};
  const float T = 0.7f;
  std::vector<double> p(l.size());
  double z = 0;
  for (size_t i = 0; i < l.size(); ++i) z += p[i] = std::exp(l[i] / T);
  for (double& x : p) x /= z;
  SamplingParams sp;
  sp.temperature = T;
  const int n = 20000;
  std::vector<int> counts(l.size(), 0);
  Philox rng(7, 0);
  for (int i = 0; i < n; ++i) {
    std::vector<float> x = l;
    ++counts[static_cast<size_t>(sample_token(x.data(), 4, sp, {}, {}, -1, rng).id)];
  }
  double chi2 = 0;
  for (size_t i = 0; i < l.size(); ++i) chi2 += std::pow(counts[i] - n * p[i], 2) / (n * p[i]);
  EXPECT_LT(chi2, 16.27);  // 3 degrees of freedom, p = 0.001
}

TEST(Sampler, PenaltiesPushRepeatedTokensDown) {
  const std::vector<float> l = {2.f, 1.9f, 0.f};
  SamplingParams rep;
  rep.repetition_penalty = 1.2f;  // 2 / 1.2 < 1.9
  EXPECT_EQ(run(l, rep, 1, {0}, {}).id, 1);
  SamplingParams freq;
  freq.frequency_penalty = 0.06f;  // seen twice: 2 - 0.12 < 1.9
  EXPECT_EQ(run(l, freq, 1, {}, {0}).id, 0);
  EXPECT_EQ(run(l, freq, 1, {}, {0, 0}).id, 1);
  SamplingParams pres;
  pres.presence_penalty = 0.2f;  // once is enough
  EXPECT_EQ(run(l, pres, 1, {}, {0}).id, 1);
  EXPECT_EQ(run(l, pres, 1, {0}, {}).id, 0);  // the prompt does not count for presence
  // Negative logits are pushed further down by the repetition penalty.
  SamplingParams neg;
  neg.repetition_penalty = 2.f;
  EXPECT_EQ(run({-1.f, -1.5f}, neg, 1, {0}, {}).id, 1);
}

TEST(Sampler, ValidateNamesTheBadField) {
  auto msg = [](auto set) {
    SamplingParams p;
    set(p);
    return p.validate().message();
  };
  EXPECT_NE(msg([](SamplingParams& p) { p.max_tokens = 0; }).find("max_tokens"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.max_tokens = -3; }).find("max_tokens"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.temperature = -1; }).find("temperature"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.top_p = 0; }).find("top_p"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.min_p = 2; }).find("min_p"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.top_k = -1; }).find("top_k"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.n = 0; }).find("n must"), std::string::npos);
  EXPECT_NE(msg([](SamplingParams& p) { p.stop = {""}; }).find("stop"), std::string::npos);
  EXPECT_TRUE(SamplingParams().validate().ok());
}

}  // namespace
}  // namespace vlm::infer
