// AdamW against a float64 transcription of the documented update (also with the clipping factor taken from a sum of
// squares tensor), the double-precision sums (of squares, plain) and HostReadback on the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

struct AdamState {
  Doubles p, m, v;
};

// One step of: g = grad * grad_scale; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p).
void adamw_ref(AdamState& s, const Doubles& grad, const ops::AdamWSettings& hp, int64_t step, float grad_scale) {
  const double t = static_cast<double>(step);
  for (size_t i = 0; i < s.p.size(); ++i) {
    const double g = grad[i] * grad_scale;
    s.m[i] = hp.beta1 * s.m[i] + (1.0 - hp.beta1) * g;
    s.v[i] = hp.beta2 * s.v[i] + (1.0 - hp.beta2) * g * g;
    const double m_hat = s.m[i] / (1.0 - std::pow(static_cast<double>(hp.beta1), t));
    const double v_hat = s.v[i] / (1.0 - std::pow(static_cast<double>(hp.beta2), t));
    s.p[i] -= hp.lr * (m_hat / (std::sqrt(v_hat) + hp.eps) + hp.weight_decay * s.p[i]);
  }
}

TEST(AdamW, MatchesFloat64ReferenceOverSeveralSteps) {
  uint64_t seed = 1;
  for (int64_t n : {1, 17, 33, 100000})
    for (float wd : {0.f, 0.1f})
      for (float grad_scale : {1.f, 0.5f}) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " wd " << wd << " grad_scale " << grad_scale);
        Tensor param = random_normal({n}, seed++), m = Tensor::zeros({n}, DType::f32),
               v = Tensor::zeros({n}, DType::f32);
        AdamState ref{to_doubles(param), Doubles(static_cast<size_t>(n), 0.0), Doubles(static_cast<size_t>(n), 0.0)};
        ops::AdamWSettings hp;
        hp.lr = 1e-2f;
        hp.beta2 = 0.999f;
        hp.weight_decay = wd;
        for (int64_t step : {1, 2, 3, 4, 1000}) {
          Tensor grad = random_normal({n}, seed++, 0.1f);
          adamw_ref(ref, to_doubles(grad), hp, step, grad_scale);
          ops::adamw_step(param, grad, m, v, hp, step, grad_scale);
          // m and v can cancel to near 0: their f32 error scales with the terms (|g| ~ 0.1), not with m or v.
          EXPECT_TRUE(all_close(m, from_doubles(ref.m, m.shape()), 1e-5, 5e-8)) << "step " << step;
          EXPECT_TRUE(all_close(v, from_doubles(ref.v, v.shape()), 1e-5, 1e-12)) << "step " << step;
          EXPECT_TRUE(all_close(param, from_doubles(ref.p, param.shape()), 1e-5, 1e-6)) << "step " << step;
        }
      }
}

TEST(AdamW, StepZeroAborts) {
  use_threadsafe_death_tests();
  Tensor p = random_normal({3}, 1), g = random_normal({3}, 2), m = Tensor::zeros({3}, DType::f32);
  Tensor v = Tensor::zeros({3}, DType::f32);
  EXPECT_DEATH(ops::adamw_step(p, g, m, v, ops::AdamWSettings{}, 0), "ops::adamw_step: step 0 must be >= 1");
}

TEST(SumOfSquares, MatchesFloat64Reference) {
  std::vector<Tensor> tensors;
  double expect = 0;
  uint64_t seed = 10;
  for (const Shape& shape : {Shape{0}, Shape{1}, Shape{17}, Shape{3, 33}, Shape{70001}, Shape{2, 3, 5}}) {
    tensors.push_back(random_normal(shape, seed++, 3.f));
    for (double x : to_doubles(tensors.back())) expect += x * x;
  }
  const double got = ops::sum_of_squares(tensors);
  EXPECT_NEAR(got, expect, 1e-12 * expect);
  EXPECT_EQ(ops::sum_of_squares({}), 0.0);
}

Tensor f64_scalar(double value) {
  Tensor t = Tensor::empty(Shape{1}, DType::f64);
  t.data<double>()[0] = value;
  return t;
}

TEST(SumOfSquares, IntoATensorMatchesTheReturnedValue) {
  std::vector<Tensor> tensors{random_normal({17}, 1, 2.f), random_normal({3, 5}, 2), Tensor::zeros({0}, DType::f32)};
  Tensor out = f64_scalar(-1.0);
  ops::sum_of_squares(out, tensors);
  EXPECT_EQ(out.data<double>()[0], ops::sum_of_squares(tensors));
  ops::sum_of_squares(out, {});
  EXPECT_EQ(out.data<double>()[0], 0.0);
}

TEST(Sum, AddsInIndexOrderInDouble) {
  Tensor x = random_normal({1001}, 3, 5.f);
  double expect = 0;
  for (double v : to_doubles(x)) expect += v;  // the same order: bit for bit
  Tensor out = f64_scalar(-1.0);
  ops::sum(out, x);
  EXPECT_EQ(out.data<double>()[0], expect);
  ops::sum(out, Tensor::zeros({0}, DType::f32));
  EXPECT_EQ(out.data<double>()[0], 0.0);
}

TEST(Sum, RejectsAnOutputThatIsNotOneF64) {
  use_threadsafe_death_tests();
  Tensor x = random_normal({4}, 1);
  Tensor two = Tensor::zeros({2}, DType::f64), f32 = Tensor::zeros({1}, DType::f32);
  EXPECT_DEATH(ops::sum(two, x), "ops::sum: out must hold one f64");
  EXPECT_DEATH(ops::sum(f32, x), "ops::sum");
}

// The clipping factor read from a sum-of-squares tensor gives the same update, bit for bit, as the factor computed
// on the host and passed as grad_scale, on both sides of the limit.
TEST(AdamW, ClipFromSumOfSquaresMatchesHostClip) {
  for (double norm_sq : {0.25, 4.0, 1e6, 0.0}) {
    SCOPED_TRACE(::testing::Message() << "sum of squares " << norm_sq);
    const float max_norm = 1.f;
    const double norm = std::sqrt(norm_sq);
    const float clip = norm > max_norm ? static_cast<float>(max_norm / (norm + 1e-6)) : 1.f;
    Tensor p1 = random_normal({37}, 5), g = random_normal({37}, 6), m1 = random_normal({37}, 7, 0.1f);
    Tensor v1 = random_uniform({37}, 8, 0.f, 0.01f);
    Tensor p2 = p1.clone(), m2 = m1.clone(), v2 = v1.clone();
    ops::AdamWSettings hp;
    hp.lr = 1e-2f;
    hp.beta2 = 0.999f;
    hp.weight_decay = 0.1f;
    hp.grad_clip = max_norm;
    ops::adamw_step_multi({{p1, g, m1, v1, Tensor()}}, hp, 3, clip);
    ops::adamw_step_multi({{p2, g, m2, v2, Tensor()}}, hp, 3, f64_scalar(norm_sq));
    EXPECT_TRUE(bitwise_equal(p1, p2));
    EXPECT_TRUE(bitwise_equal(m1, m2));
    EXPECT_TRUE(bitwise_equal(v1, v2));
  }
}

TEST(ZeroMulti, ZeroesEveryTensorAndNothingElse) {
  Tensor f = random_normal({3, 5}, 1), empty = Tensor::zeros({0}, DType::f32);
  Tensor raw = Tensor::empty({37}, DType::u8);
  std::memset(raw.raw_data(), 0xab, 37);
  Tensor mid = raw.slice(0, 3, 30);  // bytes 3 .. 29
  ops::zero_multi({f, empty, mid});
  for (float v : to_doubles(f)) EXPECT_EQ(v, 0.f);
  const auto* r = static_cast<const unsigned char*>(raw.raw_data());
  for (int i = 0; i < 37; ++i) EXPECT_EQ(r[i], i >= 3 && i < 30 ? 0 : 0xab) << "byte " << i;
  ops::zero_multi({});
}

TEST(HostReadback, CopiesTheValueWhenMade) {
  Tensor t = random_normal({2, 3}, 9);
  const ops::HostReadback r(t);
  const Tensor before = t.clone();
  t.data<float>()[0] += 1.f;  // later writes do not reach the copy
  EXPECT_TRUE(bitwise_equal(r.get(), before));
  const ops::HostReadback copy = r;  // copies share the value
  EXPECT_EQ(copy.get().raw_data(), r.get().raw_data());
  EXPECT_EQ(ops::HostReadback(f64_scalar(2.5)).scalar_f64(), 2.5);
  EXPECT_FALSE(ops::HostReadback().defined());
}

}  // namespace
}  // namespace vlm::testing
