// AdamW against a float64 transcription of the documented update, and the double-precision sum of squares.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

struct AdamState {
  Doubles p, m, v;
};

// One step of: g = grad * grad_scale; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p).
void adamw_ref(AdamState& s, const Doubles& grad, const ops::AdamWParams& hp) {
  const double t = static_cast<double>(hp.step);
  for (size_t i = 0; i < s.p.size(); ++i) {
    const double g = grad[i] * hp.grad_scale;
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
        ops::AdamWParams hp;
        hp.lr = 1e-2f;
        hp.weight_decay = wd;
        hp.grad_scale = grad_scale;
        for (int64_t step : {1, 2, 3, 4, 1000}) {
          hp.step = step;
          Tensor grad = random_normal({n}, seed++, 0.1f);
          adamw_ref(ref, to_doubles(grad), hp);
          ops::adamw_step(param, grad, m, v, hp);
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
  ops::AdamWParams hp;
  hp.step = 0;
  EXPECT_DEATH(ops::adamw_step(p, g, m, v, hp), "ops::adamw_step: step 0 must be >= 1");
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

}  // namespace
}  // namespace vlm::testing
