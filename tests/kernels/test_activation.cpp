// GELU (tanh) and SwiGLU against float64 formulas and finite differences.
#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

double gelu_tanh_ref(double x) {
  const double pi = std::acos(-1.0);
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}
double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }

Doubles map(const Doubles& x, double (*f)(double)) {
  Doubles y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = f(x[i]);
  return y;
}

const Shape kShapes[] = {{1}, {3}, {17, 33}, {2, 3, 5}, {40000}};

// Inputs spanning the interesting range, including large |x| where tanh/sigmoid saturate.
Tensor activation_input(const Shape& shape, uint64_t seed) {
  Tensor x = random_normal(shape, seed, 3.f);
  if (x.numel() >= 3) {
    x.data<float>()[0] = -20.f;
    x.data<float>()[1] = 0.f;
    x.data<float>()[2] = 15.f;
  }
  return x;
}

TEST(Activation, GeluTanhForwardMatchesFloat64Reference) {
  uint64_t seed = 1;
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape.to_string());
    Tensor x = activation_input(shape, seed++), y = nan_tensor(shape);
    ops::gelu_tanh_forward(y, x);
    EXPECT_TRUE(all_close(y, from_doubles(map(to_doubles(x), gelu_tanh_ref), shape), 1e-5, 1e-6));
  }
}

TEST(Activation, GeluTanhBackwardMatchesFiniteDifferences) {
  uint64_t seed = 10;
  for (const Shape& shape : {Shape{1}, Shape{3}, Shape{7, 9}}) {
    SCOPED_TRACE(shape.to_string());
    Tensor x = activation_input(shape, seed++), dy = random_normal(shape, seed++), dx = nan_tensor(shape);
    ops::gelu_tanh_backward(dx, dy, x);
    const RefFn ref = [](const std::vector<Doubles>& v) { return map(v[0], gelu_tanh_ref); };
    const Doubles g = numeric_grad(ref, {to_doubles(x)}, 0, to_doubles(dy));
    EXPECT_TRUE(all_close(dx, from_doubles(g, shape), 1e-4, 1e-5));
  }
}

TEST(Activation, LinearDgeluBackwardIsTheProductThenTheGeluGradient) {
  uint64_t seed = 15;
  for (const auto& [rows, out, in] : {std::array<int64_t, 3>{1, 1, 1}, {5, 3, 8}, {17, 9, 24}, {0, 4, 8}, {3, 0, 8}}) {
    SCOPED_TRACE(::testing::Message() << rows << " x " << out << " x " << in);
    const Tensor dy = random_normal({rows, out}, seed++), w = random_normal({out, in}, seed++);
    const Tensor pre = activation_input({rows, in}, seed++);
    Tensor got = nan_tensor({rows, in}), prod = nan_tensor({rows, in}), expect = nan_tensor({rows, in});
    ops::linear_dgelu_backward(got, dy, w, pre);
    Tensor none;
    ops::linear_backward(prod, none, none, dy, pre, w);
    ops::gelu_tanh_backward(expect, prod, pre);
    EXPECT_TRUE(all_close(got, expect, 0.0, 0.0));  // the same two steps on the CPU
  }
}

TEST(Activation, SwigluForwardMatchesFloat64Reference) {
  uint64_t seed = 20;
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape.to_string());
    Tensor gate = activation_input(shape, seed++), up = random_normal(shape, seed++), y = nan_tensor(shape);
    ops::swiglu_forward(y, gate, up);
    const Doubles g = to_doubles(gate), u = to_doubles(up);
    Doubles expect(g.size());
    for (size_t i = 0; i < g.size(); ++i) expect[i] = silu_ref(g[i]) * u[i];
    EXPECT_TRUE(all_close(y, from_doubles(expect, shape), 1e-5, 1e-6));
  }
}

TEST(Activation, SwigluBackwardMatchesFiniteDifferences) {
  uint64_t seed = 30;
  for (const Shape& shape : {Shape{1}, Shape{3}, Shape{7, 9}}) {
    SCOPED_TRACE(shape.to_string());
    Tensor gate = activation_input(shape, seed++), up = random_normal(shape, seed++), dy = random_normal(shape, seed++);
    Tensor dgate = nan_tensor(shape), dup = nan_tensor(shape);
    ops::swiglu_backward(dgate, dup, dy, gate, up);
    const RefFn ref = [](const std::vector<Doubles>& v) {
      Doubles y(v[0].size());
      for (size_t i = 0; i < y.size(); ++i) y[i] = silu_ref(v[0][i]) * v[1][i];
      return y;
    };
    const std::vector<Doubles> inputs = {to_doubles(gate), to_doubles(up)};
    EXPECT_TRUE(all_close(dgate, from_doubles(numeric_grad(ref, inputs, 0, to_doubles(dy)), shape), 1e-4, 1e-5));
    EXPECT_TRUE(all_close(dup, from_doubles(numeric_grad(ref, inputs, 1, to_doubles(dy)), shape), 1e-4, 1e-5));
    Tensor none, dgate_only = nan_tensor(shape);  // an undefined gradient is skipped
    ops::swiglu_backward(dgate_only, none, dy, gate, up);
    EXPECT_TRUE(bitwise_equal(dgate_only, dgate));
  }
}

}  // namespace
}  // namespace vlm::testing
