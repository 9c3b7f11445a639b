// The elementwise family on CUDA against the CPU reference: cast (bitwise: round to nearest even, ties included),
// fill, scale, add (also aliased), the row-broadcast add of positions and its accumulating backward, on odd sizes,
// f32 and bf16.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

const int64_t kSizes[] = {1, 3, 17, 129, 1000, 4099};

// f32 elementwise math on identical inputs: the CUDA and CPU libm functions differ by a few ulp.
constexpr Tolerance kElementwise{2e-6, 1e-7};

Tensor f32_from_bits(const std::vector<uint32_t>& bits) {
  Tensor t = Tensor::empty({static_cast<int64_t>(bits.size())}, DType::f32);
  std::memcpy(t.raw_data(), bits.data(), bits.size() * 4);
  return t;
}

TEST(CudaElementwise, CastRoundsToNearestEvenLikeTheCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  // Random values plus the rounding corner cases: exact ties (round to even, both directions), just above and below
  // a tie, the largest finite values, infinities, denormals and signed zeros.
  std::vector<uint32_t> bits = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0x7f7fffffu, 0xff7fffffu,
                                0x7f800000u, 0xff800000u, 0x00000001u, 0x80000001u, 0x00000000u, 0x80000000u,
                                0x007fffffu, 0x3effffffu};
  const Tensor random = random_normal({1000}, 7, 100.f);
  for (int64_t i = 0; i < random.numel(); ++i) {
    uint32_t u;
    std::memcpy(&u, &random.data<float>()[i], 4);
    bits.push_back(u);
  }
  const Tensor x = f32_from_bits(bits);
  const Shape shape = x.shape();
  Tensor ref_bf16 = Tensor::empty(shape, DType::bf16);
  ops::cast(ref_bf16, x);
  Guarded down(shape, DType::bf16);
  ops::cast(down.view(), x.to(gpu()));
  EXPECT_TRUE(bitwise_equal(down.view().to(Device::cpu()), ref_bf16));
  EXPECT_TRUE(down.guards_intact());
  // And back up: exact.
  Guarded up(shape, DType::f32);
  ops::cast(up.view(), down.view());
  Tensor ref_f32 = Tensor::empty(shape, DType::f32);
  ops::cast(ref_f32, ref_bf16);
  EXPECT_TRUE(bitwise_equal(up.view().to(Device::cpu()), ref_f32));
  // Same dtype: a copy.
  Guarded copy(shape, DType::f32);
  ops::cast(copy.view(), x.to(gpu()));
  EXPECT_TRUE(bitwise_equal(copy.view().to(Device::cpu()), x));
}

TEST(CudaElementwise, FillScaleAddMatchCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 1;
  for (DType dt : compute_dtypes())
    for (int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " n=" << n);
      const Tensor a = random_normal({n}, seed++), b = random_normal({n}, seed++);
      const Tolerance tol = output_tolerance(dt, kElementwise);

      Guarded filled(Shape{n}, dt);
      ops::fill(filled.view(), 0.3f);
      EXPECT_TRUE(matches(filled, rounded(Tensor::full({n}, 0.3f), dt), {0, 0}));

      Guarded scaled(a, dt);
      ops::scale(scaled.view(), -1.7f);
      Tensor ref = rounded(a, dt);
      ops::scale(ref, -1.7f);
      EXPECT_TRUE(matches(scaled, ref, tol));

      Guarded sum(Shape{n}, dt);
      ops::add(sum.view(), to_gpu(a, dt), to_gpu(b, dt));
      Tensor ref_sum = Tensor::empty({n}, DType::f32);
      ops::add(ref_sum, rounded(a, dt), rounded(b, dt));
      EXPECT_TRUE(matches(sum, ref_sum, tol));

      Guarded acc(a, dt);  // a += b in place, and add with out aliasing an input
      ops::add_inplace(acc.view(), to_gpu(b, dt));
      EXPECT_TRUE(matches(acc, ref_sum, tol));
      Guarded aliased(a, dt);
      ops::add(aliased.view(), aliased.view(), to_gpu(b, dt));
      EXPECT_TRUE(matches(aliased, ref_sum, tol));
    }
}

TEST(CudaElementwise, AddRowsBroadcastAndAccumulatingBackward) {
  VLM_SKIP_WITHOUT_CUDA();
  struct Case {
    int64_t blocks, rows, cols;
  };
  const Case cases[] = {{1, 1, 1}, {3, 5, 7}, {2, 196, 65}, {5, 17, 129}, {0, 4, 3}};
  uint64_t seed = 100;
  for (DType dt : compute_dtypes())
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " B=" << c.blocks << " P=" << c.rows << " C=" << c.cols);
      const Tensor x = random_normal({c.blocks * c.rows, c.cols}, seed++);
      const Tensor pos = random_normal({c.rows, c.cols}, seed++);
      Tensor ref = rounded(x, dt);
      ops::add_rows_broadcast(ref, rounded(pos, dt));
      Guarded out(x, dt);
      ops::add_rows_broadcast(out.view(), to_gpu(pos, dt));
      EXPECT_TRUE(matches(out, ref, output_tolerance(dt, kElementwise)));

      const Tensor dx = random_normal(x.shape(), seed++), dpos0 = random_normal(pos.shape(), seed++);
      Tensor ref_dpos = dpos0.clone();
      ops::add_rows_broadcast_backward(ref_dpos, rounded(dx, dt));
      Guarded dpos(dpos0, DType::f32);
      ops::add_rows_broadcast_backward(dpos.view(), to_gpu(dx, dt));
      EXPECT_TRUE(matches(dpos, ref_dpos, {1e-6, 1e-6 * static_cast<double>(c.blocks + 1)}));
    }
}

}  // namespace
}  // namespace vlm::testing
