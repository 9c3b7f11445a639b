// matmul, matmul_batched and the linear layer against float64 loops and finite differences.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

// Element (i, j) of op(x) where x is stored row-major with `cols` columns.
double op_at(const Doubles& x, int64_t cols, bool trans, int64_t i, int64_t j) {
  return trans ? x[static_cast<size_t>(j * cols + i)] : x[static_cast<size_t>(i * cols + j)];
}

// alpha * op(a) @ op(b) + beta * c for one [m, n] block.
Doubles gemm_ref(const Doubles& a, const Doubles& b, const Doubles& c, int64_t m, int64_t n, int64_t k, bool ta,
                 bool tb, double alpha, double beta) {
  Doubles out(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) s += op_at(a, ta ? m : k, ta, i, l) * op_at(b, tb ? k : n, tb, l, j);
      out[static_cast<size_t>(i * n + j)] = alpha * s + (beta == 0 ? 0.0 : beta * c[static_cast<size_t>(i * n + j)]);
    }
  return out;
}

struct GemmCase {
  int64_t m, n, k;
};
const GemmCase kGemmCases[] = {{1, 1, 1}, {3, 17, 5}, {33, 7, 64}, {17, 33, 1}, {5, 3, 0}, {0, 4, 3}, {64, 65, 66}};

TEST(Gemm, MatmulMatchesFloat64Reference) {
  uint64_t seed = 1;
  for (const GemmCase& c : kGemmCases)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (auto [alpha, beta] : {std::pair{1.f, 0.f}, std::pair{0.5f, -2.f}}) {
          SCOPED_TRACE(::testing::Message() << "m " << c.m << " n " << c.n << " k " << c.k << " ta " << ta << " tb "
                                            << tb << " alpha " << alpha << " beta " << beta);
          Tensor a = random_normal(ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, seed++);
          Tensor b = random_normal(tb ? Shape{c.n, c.k} : Shape{c.k, c.n}, seed++);
          // beta == 0 must ignore the old contents, NaN included.
          Tensor out = beta == 0.f ? nan_tensor(Shape{c.m, c.n}) : random_normal(Shape{c.m, c.n}, seed++);
          const Doubles expect =
              gemm_ref(to_doubles(a), to_doubles(b), to_doubles(out), c.m, c.n, c.k, ta, tb, alpha, beta);
          ops::matmul(out, a, b, ta, tb, alpha, beta);
          EXPECT_TRUE(all_close(out, from_doubles(expect, out.shape()), 1e-5, 1e-5 * (1 + c.k)));
        }
}

TEST(Gemm, BatchedMatchesFloat64Reference) {
  uint64_t seed = 100;
  const int64_t batch = 3;
  for (const GemmCase& c : kGemmCases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "m " << c.m << " n " << c.n << " k " << c.k << " ta " << ta << " tb " << tb);
        Tensor a = random_normal(ta ? Shape{batch, c.k, c.m} : Shape{batch, c.m, c.k}, seed++);
        Tensor b = random_normal(tb ? Shape{batch, c.n, c.k} : Shape{batch, c.k, c.n}, seed++);
        Tensor out = random_normal(Shape{batch, c.m, c.n}, seed++);
        const Doubles da = to_doubles(a), db = to_doubles(b), dc = to_doubles(out);
        Doubles expect;
        for (int64_t i = 0; i < batch; ++i) {
          auto block = [i](const Doubles& x, int64_t size) {
            return Doubles(x.begin() + i * size, x.begin() + (i + 1) * size);
          };
          const Doubles e = gemm_ref(block(da, c.m * c.k), block(db, c.k * c.n), block(dc, c.m * c.n), c.m, c.n, c.k,
                                     ta, tb, 1.5, 0.25);
          expect.insert(expect.end(), e.begin(), e.end());
        }
        ops::matmul_batched(out, a, b, ta, tb, 1.5f, 0.25f);
        EXPECT_TRUE(all_close(out, from_doubles(expect, out.shape()), 1e-5, 1e-5 * (1 + c.k)));
      }
}

// y = x @ w^T + b on flattened rows.
Doubles linear_ref(const Doubles& x, const Doubles& w, const Doubles& b, int64_t rows, int64_t in, int64_t out) {
  Doubles y(static_cast<size_t>(rows * out));
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
      for (int64_t i = 0; i < in; ++i) s += x[static_cast<size_t>(t * in + i)] * w[static_cast<size_t>(o * in + i)];
      y[static_cast<size_t>(t * out + o)] = s;
    }
  return y;
}

struct LinearCase {
  Shape x_shape;  // [..., in]
  int64_t out;
  bool bias;
};

TEST(Linear, ForwardMatchesFloat64Reference) {
  const LinearCase cases[] = {{{1, 1}, 1, true},    {{3, 5}, 4, true},     {{17, 33}, 7, false},
                              {{2, 3, 5}, 6, true}, {{33, 64}, 300, true}, {{4, 1}, 17, false}};
  uint64_t seed = 200;
  for (const LinearCase& c : cases) {
    SCOPED_TRACE(c.x_shape.to_string() + " -> " + std::to_string(c.out));
    const int64_t in = c.x_shape[c.x_shape.ndim() - 1], rows = c.x_shape.numel() / in;
    Tensor x = random_normal(c.x_shape, seed++), w = random_normal({c.out, in}, seed++);
    Tensor b = c.bias ? random_normal({c.out}, seed++) : Tensor();
    Shape y_shape = c.x_shape;
    y_shape[y_shape.ndim() - 1] = c.out;
    Tensor y = nan_tensor(y_shape);
    ops::linear_forward(y, x, w, b);
    const Doubles expect =
        linear_ref(to_doubles(x), to_doubles(w), c.bias ? to_doubles(b) : Doubles{}, rows, in, c.out);
    EXPECT_TRUE(all_close(y, from_doubles(expect, y_shape), 1e-5, 1e-5 * (1 + in)));
  }
}

TEST(Linear, AddForwardIsForwardPlusResidualBitForBit) {
  const LinearCase cases[] = {{{1, 1}, 1, true}, {{3, 5}, 4, false}, {{2, 3, 5}, 6, true}, {{33, 64}, 300, true},
                              {{4, 0}, 3, true}, {{0, 4}, 3, false}};
  uint64_t seed = 250;
  for (const LinearCase& c : cases) {
    SCOPED_TRACE(c.x_shape.to_string() + " -> " + std::to_string(c.out));
    Tensor x = random_normal(c.x_shape, seed++), w = random_normal({c.out, c.x_shape[c.x_shape.ndim() - 1]}, seed++);
    Tensor b = c.bias ? random_normal({c.out}, seed++) : Tensor();
    Shape y_shape = c.x_shape;
    y_shape[y_shape.ndim() - 1] = c.out;
    const Tensor residual = random_normal(y_shape, seed++), residual_before = residual.clone();
    Tensor product = nan_tensor(y_shape), expect = nan_tensor(y_shape), y = nan_tensor(y_shape);
    ops::linear_forward(product, x, w, b);
    ops::add(expect, residual, product);  // the two ops the model ran before
    ops::linear_add_forward(y, x, w, b, residual);
    EXPECT_TRUE(bitwise_equal(y, expect));
    EXPECT_TRUE(bitwise_equal(residual, residual_before));  // read only
  }
}

TEST(Linear, AddForwardRejectsAliasingAndShapes) {
  Tensor x = random_normal({3, 5}, 1), w = random_normal({4, 5}, 2), y = random_normal({3, 4}, 3);
  const Tensor none;
  EXPECT_DEATH(ops::linear_add_forward(y, x, w, none, y), "ops::linear_add_forward: y must not alias residual");
  Tensor small = random_normal({3, 3}, 4);
  EXPECT_DEATH(ops::linear_add_forward(y, x, w, none, small), "ops::linear_add_forward: residual is f32\\[3, 3\\]");
}

TEST(Linear, BackwardMatchesFiniteDifferencesAndContract) {
  const LinearCase cases[] = {
      {{3, 5}, 4, true}, {{1, 3}, 2, true}, {{4, 1}, 6, true}, {{2, 3, 4}, 5, true}, {{5, 2}, 300, true}};
  uint64_t seed = 300;
  for (const LinearCase& c : cases) {
    SCOPED_TRACE(c.x_shape.to_string() + " -> " + std::to_string(c.out));
    const int64_t in = c.x_shape[c.x_shape.ndim() - 1], rows = c.x_shape.numel() / in;
    Tensor x = random_normal(c.x_shape, seed++), w = random_normal({c.out, in}, seed++);
    Shape y_shape = c.x_shape;
    y_shape[y_shape.ndim() - 1] = c.out;
    Tensor dy = random_normal(y_shape, seed++);
    const RefFn ref = [&](const std::vector<Doubles>& v) { return linear_ref(v[0], v[1], v[2], rows, in, c.out); };
    const std::vector<Doubles> inputs = {to_doubles(x), to_doubles(w), to_doubles(random_normal({c.out}, seed++))};
    const Doubles gx = numeric_grad(ref, inputs, 0, to_doubles(dy));
    const Doubles gw = numeric_grad(ref, inputs, 1, to_doubles(dy));
    const Doubles gb = numeric_grad(ref, inputs, 2, to_doubles(dy));

    Tensor dx = nan_tensor(x.shape());  // overwritten
    Tensor dw0 = random_normal(w.shape(), seed++), db0 = random_normal({c.out}, seed++);
    Tensor dw = dw0.clone(), db = db0.clone();  // accumulated
    ops::linear_backward(dx, dw, db, dy, x, w);
    EXPECT_TRUE(all_close(dx, from_doubles(gx, x.shape()), 1e-4, 1e-4));
    EXPECT_TRUE(all_close(dw, from_doubles(axpy(to_doubles(dw0), gw, 1), w.shape()), 1e-4, 1e-4));
    EXPECT_TRUE(all_close(db, from_doubles(axpy(to_doubles(db0), gb, 1), db.shape()), 1e-4, 1e-4));
    ops::linear_backward(dx, dw, db, dy, x, w);  // a second call adds the same gradients again
    EXPECT_TRUE(all_close(dx, from_doubles(gx, x.shape()), 1e-4, 1e-4));
    EXPECT_TRUE(all_close(dw, from_doubles(axpy(to_doubles(dw0), gw, 2), w.shape()), 1e-4, 1e-4));
    EXPECT_TRUE(all_close(db, from_doubles(axpy(to_doubles(db0), gb, 2), db.shape()), 1e-4, 1e-4));

    // Undefined gradients are skipped.
    Tensor none, dx_only = nan_tensor(x.shape());
    ops::linear_backward(dx_only, none, none, dy, x, w);
    EXPECT_TRUE(bitwise_equal(dx_only, dx));
  }
}

}  // namespace
}  // namespace vlm::testing
