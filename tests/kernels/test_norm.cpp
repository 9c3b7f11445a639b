// LayerNorm and RMSNorm against float64 loops and finite differences, with the dx/dw/db contracts.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

constexpr double kEps = 1e-5;

struct NormRef {
  Doubles y, mean, rstd;
};

// Per row: mean, variance (population) and y = (x - mean) / sqrt(var + eps) * w + b (b empty: none).
NormRef layernorm_ref(const Doubles& x, const Doubles& w, const Doubles& b, int64_t cols) {
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  NormRef r{Doubles(x.size()), Doubles(static_cast<size_t>(rows)), Doubles(static_cast<size_t>(rows))};
  for (int64_t t = 0; t < rows; ++t) {
    const double* xt = x.data() + t * cols;
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += xt[c];
    mean /= static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) var += (xt[c] - mean) * (xt[c] - mean);
    var /= static_cast<double>(cols);
    const double rstd = 1.0 / std::sqrt(var + kEps);
    for (int64_t c = 0; c < cols; ++c)
      r.y[static_cast<size_t>(t * cols + c)] =
          (xt[c] - mean) * rstd * w[static_cast<size_t>(c)] + (b.empty() ? 0.0 : b[static_cast<size_t>(c)]);
    r.mean[static_cast<size_t>(t)] = mean;
    r.rstd[static_cast<size_t>(t)] = rstd;
  }
  return r;
}

NormRef rmsnorm_ref(const Doubles& x, const Doubles& w, int64_t cols) {
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  NormRef r{Doubles(x.size()), {}, Doubles(static_cast<size_t>(rows))};
  for (int64_t t = 0; t < rows; ++t) {
    double ms = 0;
    for (int64_t c = 0; c < cols; ++c)
      ms += x[static_cast<size_t>(t * cols + c)] * x[static_cast<size_t>(t * cols + c)];
    const double rstd = 1.0 / std::sqrt(ms / static_cast<double>(cols) + kEps);
    for (int64_t c = 0; c < cols; ++c)
      r.y[static_cast<size_t>(t * cols + c)] = x[static_cast<size_t>(t * cols + c)] * rstd * w[static_cast<size_t>(c)];
    r.rstd[static_cast<size_t>(t)] = rstd;
  }
  return r;
}

Shape rows_shape(const Shape& x_shape) { return Shape{x_shape.numel() / x_shape[x_shape.ndim() - 1]}; }

const Shape kForwardShapes[] = {{1, 1}, {3, 17}, {17, 33}, {4, 768}, {2, 3, 5}, {5, 300}, {64, 64}};
const Shape kBackwardShapes[] = {{3, 5}, {2, 17}, {1, 1}, {2, 2, 3}, {2, 300}};

TEST(LayerNorm, ForwardMatchesFloat64Reference) {
  uint64_t seed = 1;
  for (const Shape& shape : kForwardShapes)
    for (bool bias : {true, false}) {
      SCOPED_TRACE(shape.to_string() + (bias ? " bias" : " no bias"));
      const int64_t cols = shape[shape.ndim() - 1];
      Tensor x = random_normal(shape, seed++, 2.f), w = random_normal({cols}, seed++);
      Tensor b = bias ? random_normal({cols}, seed++) : Tensor();
      Tensor y = nan_tensor(shape), mean = nan_tensor(rows_shape(shape)), rstd = nan_tensor(rows_shape(shape));
      ops::layernorm_forward(y, mean, rstd, x, w, b, static_cast<float>(kEps));
      const NormRef r = layernorm_ref(to_doubles(x), to_doubles(w), bias ? to_doubles(b) : Doubles{}, cols);
      EXPECT_TRUE(all_close(y, from_doubles(r.y, shape), 1e-4, 1e-4));
      EXPECT_TRUE(all_close(mean, from_doubles(r.mean, mean.shape()), 1e-5, 1e-5));
      EXPECT_TRUE(all_close(rstd, from_doubles(r.rstd, rstd.shape()), 1e-4, 0));
      Tensor none, y2 = nan_tensor(shape);  // stats not needed: same y
      ops::layernorm_forward(y2, none, none, x, w, b, static_cast<float>(kEps));
      EXPECT_TRUE(bitwise_equal(y2, y));
    }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferencesAndContract) {
  uint64_t seed = 100;
  for (const Shape& shape : kBackwardShapes) {
    SCOPED_TRACE(shape.to_string());
    const int64_t cols = shape[shape.ndim() - 1];
    Tensor x = random_normal(shape, seed++), w = random_normal({cols}, seed++), b = random_normal({cols}, seed++);
    Tensor dy = random_normal(shape, seed++);
    Tensor y = Tensor::empty(shape, DType::f32), mean = Tensor::empty(rows_shape(shape), DType::f32);
    Tensor rstd = Tensor::empty(rows_shape(shape), DType::f32);
    ops::layernorm_forward(y, mean, rstd, x, w, b, static_cast<float>(kEps));

    const RefFn ref = [&](const std::vector<Doubles>& v) { return layernorm_ref(v[0], v[1], v[2], cols).y; };
    const std::vector<Doubles> inputs = {to_doubles(x), to_doubles(w), to_doubles(b)};
    const Doubles gx = numeric_grad(ref, inputs, 0, to_doubles(dy), 1e-6);
    const Doubles gw = numeric_grad(ref, inputs, 1, to_doubles(dy));
    const Doubles gb = numeric_grad(ref, inputs, 2, to_doubles(dy));

    Tensor dx = nan_tensor(shape), dw0 = random_normal({cols}, seed++), db0 = random_normal({cols}, seed++);
    Tensor dw = dw0.clone(), db = db0.clone();
    for (int call = 1; call <= 2; ++call) {
      ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
      EXPECT_TRUE(all_close(dx, from_doubles(gx, shape), 1e-3, 1e-4)) << "call " << call;
      EXPECT_TRUE(all_close(dw, from_doubles(axpy(to_doubles(dw0), gw, call), dw.shape()), 1e-4, 1e-4))
          << "call " << call;
      EXPECT_TRUE(all_close(db, from_doubles(axpy(to_doubles(db0), gb, call), db.shape()), 1e-4, 1e-4))
          << "call " << call;
    }
  }
}

TEST(RmsNorm, ForwardMatchesFloat64Reference) {
  uint64_t seed = 200;
  for (const Shape& shape : kForwardShapes) {
    SCOPED_TRACE(shape.to_string());
    const int64_t cols = shape[shape.ndim() - 1];
    Tensor x = random_normal(shape, seed++, 3.f), w = random_normal({cols}, seed++);
    Tensor y = nan_tensor(shape), rstd = nan_tensor(rows_shape(shape));
    ops::rmsnorm_forward(y, rstd, x, w, static_cast<float>(kEps));
    const NormRef r = rmsnorm_ref(to_doubles(x), to_doubles(w), cols);
    EXPECT_TRUE(all_close(y, from_doubles(r.y, shape), 1e-4, 1e-5));
    EXPECT_TRUE(all_close(rstd, from_doubles(r.rstd, rstd.shape()), 1e-5, 0));
  }
}

TEST(RmsNorm, BackwardMatchesFiniteDifferencesAndContract) {
  uint64_t seed = 300;
  for (const Shape& shape : kBackwardShapes) {
    SCOPED_TRACE(shape.to_string());
    const int64_t cols = shape[shape.ndim() - 1];
    Tensor x = random_normal(shape, seed++), w = random_normal({cols}, seed++), dy = random_normal(shape, seed++);
    Tensor y = Tensor::empty(shape, DType::f32), rstd = Tensor::empty(rows_shape(shape), DType::f32);
    ops::rmsnorm_forward(y, rstd, x, w, static_cast<float>(kEps));

    const RefFn ref = [&](const std::vector<Doubles>& v) { return rmsnorm_ref(v[0], v[1], cols).y; };
    const std::vector<Doubles> inputs = {to_doubles(x), to_doubles(w)};
    const Doubles gx = numeric_grad(ref, inputs, 0, to_doubles(dy), 1e-6);
    const Doubles gw = numeric_grad(ref, inputs, 1, to_doubles(dy));

    Tensor dx = nan_tensor(shape), dw0 = random_normal({cols}, seed++), dw = dw0.clone();
    for (int call = 1; call <= 2; ++call) {
      ops::rmsnorm_backward(dx, dw, dy, x, w, rstd);
      EXPECT_TRUE(all_close(dx, from_doubles(gx, shape), 1e-3, 1e-4)) << "call " << call;
      EXPECT_TRUE(all_close(dw, from_doubles(axpy(to_doubles(dw0), gw, call), dw.shape()), 1e-4, 1e-4))
          << "call " << call;
    }
  }
}

}  // namespace
}  // namespace vlm::testing
