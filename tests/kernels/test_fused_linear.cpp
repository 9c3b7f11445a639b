// The fused_linear family on the CPU: rmsnorm_linear_forward and rmsnorm_linear_swiglu_forward equal the ops they
// fuse (rmsnorm_forward, linear_forward, swiglu_packed_forward) bit for bit, with and without a bias, for an f32 y of
// the plain form, and over leading dims that flatten into rows; rmsnorm_qkv_paged_write equals rmsnorm_linear_forward
// then qkv_split_paged_write; the boundary names the tensor it rejects.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"
#include "testing/test_util.h"

namespace vlm::testing {
namespace {

constexpr float kEps = 1e-5f;

Tensor normalized_rows(const Tensor& x, const Tensor& g) {
  Tensor n = Tensor::empty(x.shape(), DType::f32), none;
  ops::rmsnorm_forward(n, none, x, g, kEps);
  return n;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(RmsnormLinear, EqualsNormThenLinear) {
  uint64_t seed = 1;
  for (int64_t rows : {1, 3, 8, 19})
    for (bool bias : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "rows " << rows << " bias " << bias);
      const int64_t in = 40, out = 24;
      const Tensor x = random_normal({rows, in}, seed++), g = random_normal({in}, seed++);
      const Tensor w = random_normal({out, in}, seed++);
      const Tensor b = bias ? random_normal({out}, seed++) : Tensor();
      Tensor want = Tensor::empty({rows, out}, DType::f32);
      ops::linear_forward(want, normalized_rows(x, g), w, b);
      Tensor got = Tensor::empty({rows, out}, DType::f32);
      ops::rmsnorm_linear_forward(got, x, g, kEps, w, b);
      EXPECT_TRUE(same_bits(got, want));
    }
}

TEST(RmsnormLinear, LeadingDimsFlattenIntoRows) {
  const Tensor x = random_normal({2, 3, 16}, 7), g = random_normal({16}, 8), w = random_normal({5, 16}, 9);
  Tensor got = Tensor::empty({2, 3, 5}, DType::f32);
  ops::rmsnorm_linear_forward(got, x, g, kEps, w, Tensor());
  Tensor want = Tensor::empty({6, 5}, DType::f32);
  ops::linear_forward(want, normalized_rows(x.view({6, 16}), g), w, Tensor());
  EXPECT_TRUE(same_bits(got.view({6, 5}), want));
}

TEST(RmsnormLinearSwiglu, EqualsNormLinearSwiglu) {
  uint64_t seed = 100;
  for (int64_t rows : {1, 5, 8, 12})
    for (bool bias : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "rows " << rows << " bias " << bias);
      const int64_t in = 32, inter = 20;
      const Tensor x = random_normal({rows, in}, seed++), g = random_normal({in}, seed++);
      const Tensor w = random_normal({2 * inter, in}, seed++);
      const Tensor b = bias ? random_normal({2 * inter}, seed++) : Tensor();
      Tensor gate_up = Tensor::empty({rows, 2 * inter}, DType::f32);
      ops::linear_forward(gate_up, normalized_rows(x, g), w, b);
      Tensor want = Tensor::empty({rows, inter}, DType::f32);
      ops::swiglu_packed_forward(want, gate_up);
      Tensor got = Tensor::empty({rows, inter}, DType::f32);
      ops::rmsnorm_linear_swiglu_forward(got, x, g, kEps, w, b);
      EXPECT_TRUE(same_bits(got, want));
    }
}

TEST(FusedLinearDeathTest, BoundaryNamesTheTensor) {
  const Tensor x = random_normal({2, 8}, 1), g = random_normal({8}, 2), w = random_normal({6, 8}, 3);
  Tensor y = Tensor::empty({2, 6}, DType::f32), half = Tensor::empty({2, 3}, DType::f32);
  const Tensor short_g = random_normal({7}, 4), odd_w = random_normal({5, 8}, 5), wide_x = random_normal({2, 9}, 6);
  EXPECT_DEATH(ops::rmsnorm_linear_forward(y, x, short_g, kEps, w, Tensor()), "rmsnorm_linear_forward: norm_w is");
  EXPECT_DEATH(ops::rmsnorm_linear_forward(y, wide_x, g, kEps, w, Tensor()), "rmsnorm_linear_forward: x is");
  EXPECT_DEATH(ops::rmsnorm_linear_forward(half, x, g, kEps, w, Tensor()), "rmsnorm_linear_forward: y is");
  EXPECT_DEATH(ops::rmsnorm_linear_swiglu_forward(y, x, g, kEps, w, Tensor()), "rmsnorm_linear_swiglu_forward: y is");
  Tensor y5 = Tensor::empty({2, 2}, DType::f32);
  EXPECT_DEATH(ops::rmsnorm_linear_swiglu_forward(y5, x, g, kEps, odd_w, Tensor()),
               "rmsnorm_linear_swiglu_forward: w is f32\\[5, 8\\] cpu, expected \\[2I, in\\]");
  ops::rmsnorm_linear_swiglu_forward(half, x, g, kEps, w, Tensor());  // the right shapes pass
}

TEST(RmsnormQkvPagedWrite, EqualsNormLinearThenSplitPagedWrite) {
  uint64_t seed = 500;
  const int64_t heads_q = 4, heads_kv = 2, dim = 8, in = 24, blocks = 3, block_size = 4;
  for (int64_t rows : {1, 3, 6})
    for (float theta : {10000.f, 0.f})
      for (bool bias : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "rows " << rows << " theta " << theta << " bias " << bias);
        const int64_t out = (heads_q + 2 * heads_kv) * dim;
        const Tensor x = random_normal({rows, in}, seed++), g = random_normal({in}, seed++);
        const Tensor w = random_normal({out, in}, seed++), b = bias ? random_normal({out}, seed++) : Tensor();
        const Tensor k0 = random_normal({blocks, block_size, heads_kv, dim}, seed++);
        const Tensor v0 = random_normal(k0.shape(), seed++);
        std::vector<int32_t> pos, slots;
        for (int64_t r = 0; r < rows; ++r) {
          pos.push_back(static_cast<int32_t>(5 + 3 * r));
          slots.push_back(r == 1 ? -1 : static_cast<int32_t>(2 * r + 1));  // row 1: padding
        }
        const Tensor positions = i32_tensor(pos), slot_mapping = i32_tensor(slots);
        Tensor qkv = Tensor::empty({rows, out}, DType::f32);
        ops::rmsnorm_linear_forward(qkv, x, g, kEps, w, b);
        Tensor q_want = Tensor::empty({rows, heads_q, dim}, DType::f32), k_want = k0.clone(), v_want = v0.clone();
        ops::qkv_split_paged_write(q_want, k_want, v_want, qkv, positions, slot_mapping, theta);
        Tensor q = Tensor::empty({rows, heads_q, dim}, DType::f32), k = k0.clone(), v = v0.clone();
        ops::rmsnorm_qkv_paged_write(q, k, v, x, g, kEps, w, b, positions, slot_mapping, theta);
        EXPECT_TRUE(same_bits(q, q_want));
        EXPECT_TRUE(same_bits(k, k_want));
        EXPECT_TRUE(same_bits(v, v_want));
      }
}

TEST(RmsnormQkvPagedWriteDeathTest, BoundaryNamesTheTensor) {
  const Tensor x = random_normal({2, 8}, 1), g = random_normal({8}, 2), w = random_normal({(2 + 2) * 4, 8}, 3);
  Tensor q = Tensor::empty({2, 2, 4}, DType::f32);
  Tensor k = Tensor::zeros({2, 4, 1, 4}, DType::f32), v = Tensor::zeros({2, 4, 1, 4}, DType::f32);
  const Tensor pos = i32_tensor({0, 1}), slots = i32_tensor({0, 9}), wide_w = random_normal({20, 8}, 4);
  EXPECT_DEATH(ops::rmsnorm_qkv_paged_write(q, k, v, x, g, kEps, wide_w, Tensor(), pos, slots, 10000.f),
               "rmsnorm_qkv_paged_write: x is f32\\[2, 8\\] cpu, w is f32\\[20, 8\\] cpu");
  EXPECT_DEATH(ops::rmsnorm_qkv_paged_write(q, k, v, x, g, kEps, w, Tensor(), pos, slots, 10000.f),
               "slot_mapping");  // slot 9 is outside the 8 cache rows
}

}  // namespace
}  // namespace vlm::testing
