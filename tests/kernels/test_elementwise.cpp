// fill, scale, add, add_inplace and the row-broadcast add (with its backward) against float64 loops.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

const Shape kShapes[] = {{1}, {3}, {17, 33}, {2, 3, 5}, {70000}, {0, 4}};

TEST(Elementwise, FillScaleAddMatchReference) {
  uint64_t seed = 1;
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape.to_string());
    Tensor x = nan_tensor(shape);
    ops::fill(x, 2.5f);
    EXPECT_TRUE(all_close(x, Tensor::full(shape, 2.5f), 0, 0));

    Tensor a = random_normal(shape, seed++), b = random_normal(shape, seed++);
    const Doubles da = to_doubles(a), db = to_doubles(b);
    Tensor s = a.clone();
    ops::scale(s, -0.75f);
    EXPECT_TRUE(all_close(s, from_doubles(axpy(Doubles(da.size(), 0.0), da, -0.75), shape), 1e-7, 0));

    Tensor out = nan_tensor(shape);
    ops::add(out, a, b);
    EXPECT_TRUE(all_close(out, from_doubles(axpy(da, db, 1), shape), 1e-7, 0));

    Tensor alias = a.clone();
    ops::add(alias, alias, b);  // out aliases a
    EXPECT_TRUE(bitwise_equal(alias, out));
    Tensor alias_b = b.clone();
    ops::add(alias_b, a, alias_b);  // out aliases b
    EXPECT_TRUE(bitwise_equal(alias_b, out));

    Tensor acc = a.clone();
    ops::add_inplace(acc, b);
    EXPECT_TRUE(bitwise_equal(acc, out));
  }
}

struct BroadcastCase {
  int64_t blocks, rows, cols;
};
const BroadcastCase kBroadcastCases[] = {{1, 1, 1}, {3, 5, 17}, {2, 33, 300}, {4, 1, 3}, {0, 3, 2}, {5, 49, 64}};

TEST(Elementwise, AddRowsBroadcastMatchesReference) {
  uint64_t seed = 10;
  for (const BroadcastCase& c : kBroadcastCases) {
    SCOPED_TRACE(::testing::Message() << c.blocks << "x" << c.rows << "x" << c.cols);
    Tensor x = random_normal({c.blocks * c.rows, c.cols}, seed++), pos = random_normal({c.rows, c.cols}, seed++);
    const Doubles dx = to_doubles(x), dp = to_doubles(pos);
    Doubles expect = dx;
    for (int64_t b = 0; b < c.blocks; ++b)
      for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t col = 0; col < c.cols; ++col)
          expect[static_cast<size_t>((b * c.rows + r) * c.cols + col)] += dp[static_cast<size_t>(r * c.cols + col)];
    ops::add_rows_broadcast(x, pos);
    EXPECT_TRUE(all_close(x, from_doubles(expect, x.shape()), 1e-6, 1e-6));
  }
}

TEST(Elementwise, AddRowsBroadcastBackwardMatchesFiniteDifferencesAndAccumulates) {
  uint64_t seed = 20;
  for (const BroadcastCase& c : kBroadcastCases) {
    SCOPED_TRACE(::testing::Message() << c.blocks << "x" << c.rows << "x" << c.cols);
    const Shape x_shape{c.blocks * c.rows, c.cols}, pos_shape{c.rows, c.cols};
    Tensor dy = random_normal(x_shape, seed++);
    Doubles grad;
    if (c.blocks * c.rows * c.cols <= 4096) {
      // The forward as a float64 function of pos (x fixed at 0): y[b, r, :] = pos[r, :].
      const RefFn ref = [&](const std::vector<Doubles>& v) {
        Doubles y(static_cast<size_t>(x_shape.numel()));
        for (size_t i = 0; i < y.size(); ++i) y[i] = v[0][i % v[0].size()];
        return y;
      };
      grad = numeric_grad(ref, {to_doubles(random_normal(pos_shape, seed++))}, 0, to_doubles(dy));
    } else {  // too large for finite differences: sum the blocks directly
      const Doubles d = to_doubles(dy);
      grad.assign(static_cast<size_t>(pos_shape.numel()), 0.0);
      for (size_t i = 0; i < d.size(); ++i) grad[i % grad.size()] += d[i];
    }
    Tensor dpos0 = random_normal(pos_shape, seed++), dpos = dpos0.clone();
    ops::add_rows_broadcast_backward(dpos, dy);
    EXPECT_TRUE(all_close(dpos, from_doubles(axpy(to_doubles(dpos0), grad, 1), pos_shape), 1e-5, 1e-5));
    ops::add_rows_broadcast_backward(dpos, dy);
    EXPECT_TRUE(all_close(dpos, from_doubles(axpy(to_doubles(dpos0), grad, 2), pos_shape), 1e-5, 1e-5));
  }
}

}  // namespace
}  // namespace vlm::testing
