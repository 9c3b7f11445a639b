// Rotary position embedding (rotate_half layout) against a float64 rotation and finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

// Rotates each pair (x[i], x[i + D/2]) of every head by pos * theta^(-2i/D) (times `sign`).
Doubles rope_ref(const Doubles& x, const std::vector<int32_t>& pos, int64_t heads, int64_t dim, double theta,
                 double sign) {
  Doubles y(x.size());
  const int64_t tokens = static_cast<int64_t>(pos.size()), half = dim / 2;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double angle = sign * pos[static_cast<size_t>(t)] * std::pow(theta, -2.0 * i / dim);
        const size_t lo = static_cast<size_t>((t * heads + h) * dim + i), hi = lo + static_cast<size_t>(half);
        y[lo] = x[lo] * std::cos(angle) - x[hi] * std::sin(angle);
        y[hi] = x[hi] * std::cos(angle) + x[lo] * std::sin(angle);
      }
  return y;
}

struct RopeCase {
  int64_t tokens, heads, dim;
  float theta;
};
const RopeCase kCases[] = {
    {1, 1, 2, 10000.f}, {3, 2, 8, 10000.f}, {17, 3, 64, 10000.f}, {5, 4, 6, 100000.f}, {33, 9, 64, 100000.f}};

std::vector<int32_t> positions(int64_t tokens, uint64_t seed) {
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  Philox rng(seed);
  for (auto& p : pos) p = static_cast<int32_t>(rng.uniform_int(64));
  return pos;
}

TEST(Rope, ForwardMatchesFloat64Reference) {
  uint64_t seed = 1;
  for (const RopeCase& c : kCases) {
    SCOPED_TRACE(::testing::Message() << c.tokens << "x" << c.heads << "x" << c.dim << " theta " << c.theta);
    const Shape shape{c.tokens, c.heads, c.dim};
    Tensor x = random_normal(shape, seed++);
    const std::vector<int32_t> pos = positions(c.tokens, seed++);
    const Doubles expect = rope_ref(to_doubles(x), pos, c.heads, c.dim, c.theta, 1.0);
    ops::rope_forward(x, i32_tensor(pos), c.theta);
    // Positions < 64: the f32 angle is within ~64 * 2^-24 rad of the exact one.
    EXPECT_TRUE(all_close(x, from_doubles(expect, shape), 1e-5, 2e-5));
  }
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  uint64_t seed = 100;
  for (const RopeCase& c : kCases) {
    if (c.tokens * c.heads * c.dim > 2000) continue;
    SCOPED_TRACE(::testing::Message() << c.tokens << "x" << c.heads << "x" << c.dim);
    const Shape shape{c.tokens, c.heads, c.dim};
    Tensor x = random_normal(shape, seed++), dy = random_normal(shape, seed++);
    const std::vector<int32_t> pos = positions(c.tokens, seed++);
    const RefFn ref = [&](const std::vector<Doubles>& v) { return rope_ref(v[0], pos, c.heads, c.dim, c.theta, 1.0); };
    const Doubles g = numeric_grad(ref, {to_doubles(x)}, 0, to_doubles(dy));
    Tensor dx = dy.clone();
    ops::rope_backward(dx, i32_tensor(pos), c.theta);
    EXPECT_TRUE(all_close(dx, from_doubles(g, shape), 1e-4, 2e-5));
  }
}

TEST(Rope, BackwardInvertsForward) {
  const Shape shape{17, 3, 64};
  Tensor x = random_normal(shape, 7), y = x.clone();
  const Tensor pos = i32_tensor(positions(17, 8));
  ops::rope_forward(y, pos, 10000.f);
  ops::rope_backward(y, pos, 10000.f);
  EXPECT_TRUE(all_close(y, x, 1e-5, 1e-5));
}

// Row-strided views (the q and k heads of a packed projection) are a CUDA-only layout: the CPU op names the tensor.
TEST(Rope, CpuRejectsRowStridedViews) {
  const Tensor packed = random_normal({5, 4, 8}, 9);
  Tensor qk = packed.slice(1, 0, 3);
  const Tensor pos = i32_tensor(positions(5, 1));
  EXPECT_DEATH(ops::rope_forward(qk, pos, 10000.f), "ops::rope_forward: x is f32\\[5, 3, 8\\].* not contiguous");
}

}  // namespace
}  // namespace vlm::testing
