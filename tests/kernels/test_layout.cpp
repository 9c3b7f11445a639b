// Patch extraction and pixel shuffle: exact permutations, checked element by element from the input side, and
// their backwards as exact adjoints that overwrite every input gradient.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

struct PatchCase {
  int64_t batch, channels, height, width;
  int patch;
};
const PatchCase kPatchCases[] = {
    {1, 1, 1, 1, 1}, {2, 3, 6, 9, 3}, {1, 3, 32, 16, 16}, {3, 1, 4, 4, 2}, {2, 3, 34, 17, 17}};

// Flat patch-matrix offset of image element (b, c, y, x).
int64_t patch_offset(const PatchCase& c, int64_t b, int64_t ch, int64_t y, int64_t x) {
  const int64_t p = c.patch, gh = c.height / p, gw = c.width / p;
  const int64_t row = (b * gh + y / p) * gw + x / p, feature = (ch * p + y % p) * p + x % p;
  return row * (c.channels * p * p) + feature;
}

TEST(Layout, ImageToPatchesIsTheConvPermutation) {
  uint64_t seed = 1;
  for (const PatchCase& c : kPatchCases) {
    SCOPED_TRACE(::testing::Message() << c.batch << "x" << c.channels << "x" << c.height << "x" << c.width << " p "
                                      << c.patch);
    const int64_t p = c.patch, rows = c.batch * (c.height / p) * (c.width / p), feats = c.channels * p * p;
    Tensor images = random_normal({c.batch, c.channels, c.height, c.width}, seed++);
    Tensor patches = nan_tensor({rows, feats});
    ops::image_to_patches(patches, images, c.patch);
    Tensor expect = nan_tensor(patches.shape());
    for (int64_t b = 0, i = 0; b < c.batch; ++b)
      for (int64_t ch = 0; ch < c.channels; ++ch)
        for (int64_t y = 0; y < c.height; ++y)
          for (int64_t x = 0; x < c.width; ++x, ++i)
            expect.data<float>()[patch_offset(c, b, ch, y, x)] = images.data<float>()[i];
    EXPECT_TRUE(bitwise_equal(patches, expect));

    Tensor dpatches = random_normal(patches.shape(), seed++), dimages = nan_tensor(images.shape());
    ops::image_to_patches_backward(dimages, dpatches, c.patch);
    Tensor dexpect = nan_tensor(images.shape());
    for (int64_t b = 0, i = 0; b < c.batch; ++b)
      for (int64_t ch = 0; ch < c.channels; ++ch)
        for (int64_t y = 0; y < c.height; ++y)
          for (int64_t x = 0; x < c.width; ++x, ++i)
            dexpect.data<float>()[i] = dpatches.data<float>()[patch_offset(c, b, ch, y, x)];
    EXPECT_TRUE(bitwise_equal(dimages, dexpect));
  }
}

struct ShuffleCase {
  int64_t batch, side, cols;
  int factor;
};
const ShuffleCase kShuffleCases[] = {{1, 2, 1, 2}, {2, 4, 3, 2}, {1, 6, 5, 3}, {2, 3, 4, 1}, {2, 14, 64, 2}};

TEST(Layout, PixelShuffleMatchesNanoVlm) {
  uint64_t seed = 100;
  for (const ShuffleCase& c : kShuffleCases) {
    SCOPED_TRACE(::testing::Message() << c.batch << "x" << c.side << "^2x" << c.cols << " r " << c.factor);
    const int64_t r = c.factor, s = c.side, out_side = s / r;
    Tensor x = random_normal({c.batch, s * s, c.cols}, seed++);
    Tensor y = nan_tensor({c.batch, out_side * out_side, c.cols * r * r});
    ops::pixel_shuffle_forward(y, x, c.factor);
    // Walk x in storage order; (hh, ww) = (ho * r + ry, wo * r + rx).
    auto y_offset = [&](int64_t b, int64_t hh, int64_t ww, int64_t ch) {
      const int64_t token = (hh / r) * out_side + ww / r, feature = ((hh % r) * r + ww % r) * c.cols + ch;
      return (b * out_side * out_side + token) * c.cols * r * r + feature;
    };
    Tensor expect = nan_tensor(y.shape());
    for (int64_t b = 0, i = 0; b < c.batch; ++b)
      for (int64_t hh = 0; hh < s; ++hh)
        for (int64_t ww = 0; ww < s; ++ww)
          for (int64_t ch = 0; ch < c.cols; ++ch, ++i)
            expect.data<float>()[y_offset(b, hh, ww, ch)] = x.data<float>()[i];
    EXPECT_TRUE(bitwise_equal(y, expect));

    Tensor dy = random_normal(y.shape(), seed++), dx = nan_tensor(x.shape());
    ops::pixel_shuffle_backward(dx, dy, c.factor);
    Tensor dexpect = nan_tensor(x.shape());
    for (int64_t b = 0, i = 0; b < c.batch; ++b)
      for (int64_t hh = 0; hh < s; ++hh)
        for (int64_t ww = 0; ww < s; ++ww)
          for (int64_t ch = 0; ch < c.cols; ++ch, ++i)
            dexpect.data<float>()[i] = dy.data<float>()[y_offset(b, hh, ww, ch)];
    EXPECT_TRUE(bitwise_equal(dx, dexpect));
  }
}

}  // namespace
}  // namespace vlm::testing
