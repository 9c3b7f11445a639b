// tree_max (kernels/cuda/flash/flash_reduce.h), the Hopper forward's row max, on the host: the exact maximum for every
// array length the kernels use and the odd ones in between, with -inf entries and all entries -inf.
#include "kernels/cuda/flash/flash_reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace vlm::flash {
namespace {

template <int N>
void check_lengths(std::mt19937& rng) {
  std::normal_distribution<float> dist(0.f, 10.f);
  for (int trial = 0; trial < 50; ++trial) {
    float v[N];
    for (float& x : v) x = trial % 5 == 4 ? -INFINITY : (rng() % 4 == 0 ? -INFINITY : dist(rng));
    const float expected = *std::max_element(v, v + N);
    const float got = tree_max(v);
    if (std::isinf(expected)) {
      EXPECT_TRUE(std::isinf(got) && got < 0) << "N=" << N << " got " << got;
    } else {
      EXPECT_EQ(got, expected) << "N=" << N << " trial " << trial;
    }
  }
  if constexpr (N > 1) check_lengths<N - 1>(rng);
}

TEST(FlashReduce, TreeMaxIsTheExactMaximum) {
  std::mt19937 rng(7);
  check_lengths<24>(rng);  // 24 down to 1: the 128-, 160- and 192-key steps use 16, 20 and 24
}

TEST(FlashReduce, TreeMaxFindsTheMaximumAtEveryPosition) {
  for (int pos = 0; pos < 20; ++pos) {
    float v[20];
    for (int i = 0; i < 20; ++i) v[i] = -static_cast<float>(i + 1);
    v[pos] = 3.5f;
    EXPECT_EQ(tree_max(v), 3.5f) << "at " << pos;
  }
}

}  // namespace
}  // namespace vlm::flash
