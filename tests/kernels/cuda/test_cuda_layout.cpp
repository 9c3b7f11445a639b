// The layout family on CUDA against the CPU reference: image_to_patches and pixel shuffle forward/backward, exact
// bijections on the vector and scalar paths, f32 and bf16.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

constexpr Tolerance kExact{0, 0};

TEST(CudaLayout, PatchesAndPixelShuffleAreExact) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 200;
  struct PatchCase {
    int64_t batch, channels, height, width;
    int patch;
  };
  // Patches of 8 and 16 (whole 16-byte vectors per patch row in bf16 and f32) take the vector path, the others the
  // scalar one; likewise shuffles of 24 and 64 columns.
  const PatchCase patch_cases[] = {{1, 1, 1, 1, 1},    {2, 3, 4, 6, 2},    {1, 3, 34, 17, 17},
                                   {3, 2, 48, 32, 16}, {2, 3, 16, 40, 8}};
  struct ShuffleCase {
    int64_t batch, side, cols;
    int factor;
  };
  const ShuffleCase shuffle_cases[] = {{1, 1, 1, 1}, {2, 4, 3, 2},   {1, 14, 17, 2},
                                       {2, 9, 5, 3}, {2, 14, 64, 2}, {1, 6, 24, 3}};
  for (DType dt : compute_dtypes()) {
    for (const PatchCase& c : patch_cases) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " images [" << c.batch << ", " << c.channels << ", "
                                        << c.height << ", " << c.width << "] patch " << c.patch);
      const Shape is{c.batch, c.channels, c.height, c.width};
      const Shape ps{c.batch * (c.height / c.patch) * (c.width / c.patch), c.channels * c.patch * c.patch};
      const Tensor images = random_normal(is, seed++), dpatches = random_normal(ps, seed++);
      Tensor ref = Tensor::empty(ps, DType::f32), ref_back = Tensor::empty(is, DType::f32);
      ops::image_to_patches(ref, rounded(images, dt), c.patch);
      ops::image_to_patches_backward(ref_back, rounded(dpatches, dt), c.patch);
      Guarded patches(ps, dt), dimages(is, dt);
      ops::image_to_patches(patches.view(), to_gpu(images, dt), c.patch);
      ops::image_to_patches_backward(dimages.view(), to_gpu(dpatches, dt), c.patch);
      EXPECT_TRUE(matches(patches, ref, kExact));
      EXPECT_TRUE(matches(dimages, ref_back, kExact));
    }
    for (const ShuffleCase& c : shuffle_cases) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " x [" << c.batch << ", " << c.side * c.side << ", "
                                        << c.cols << "] factor " << c.factor);
      const int64_t out_side = c.side / c.factor;
      const Shape xs{c.batch, c.side * c.side, c.cols}, ys{c.batch, out_side * out_side, c.cols * c.factor * c.factor};
      const Tensor x = random_normal(xs, seed++), dy = random_normal(ys, seed++);
      Tensor ref = Tensor::empty(ys, DType::f32), ref_back = Tensor::empty(xs, DType::f32);
      ops::pixel_shuffle_forward(ref, rounded(x, dt), c.factor);
      ops::pixel_shuffle_backward(ref_back, rounded(dy, dt), c.factor);
      Guarded y(ys, dt), dx(xs, dt);
      ops::pixel_shuffle_forward(y.view(), to_gpu(x, dt), c.factor);
      ops::pixel_shuffle_backward(dx.view(), to_gpu(dy, dt), c.factor);
      EXPECT_TRUE(matches(y, ref, kExact));
      EXPECT_TRUE(matches(dx, ref_back, kExact));
    }
  }
}

}  // namespace
}  // namespace vlm::testing
