// Row and layout movement on CUDA against the CPU reference: embedding forward (exact) and its deterministic
// accumulating backward (repeated ids, ids beyond the first vocabulary tile), gather/scatter rows (exact),
// image_to_patches and pixel shuffle forward/backward (exact bijections), and bad indices recorded, not aborted.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

constexpr Tolerance kExact{0, 0};

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  Philox rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(std::min<int64_t>(vocab - 1, rng.uniform() * vocab));
  return ids;
}

TEST(CudaEmbedding, ForwardAndAccumulatingBackwardMatchCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  struct Case {
    int64_t tokens, vocab, cols;
  };
  // Vocabularies smaller than, equal to and larger than a block's rows; columns across several column blocks; more
  // tokens than ids per scan chunk, with many repeats.
  const Case cases[] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 129}, {300, 7, 64}, {1000, 1000, 257}, {0, 4, 3}};
  uint64_t seed = 1;
  for (DType dt : compute_dtypes())
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " T=" << c.tokens << " V=" << c.vocab << " C=" << c.cols);
      const Tensor table = random_normal({c.vocab, c.cols}, seed++);
      const std::vector<int32_t> ids = random_ids(c.tokens, c.vocab, seed++);
      const Tensor ids_cpu = i32_tensor(ids), ids_gpu = gpu_i32(ids);
      Tensor ref = Tensor::empty({c.tokens, c.cols}, DType::f32);
      ops::embedding_forward(ref, rounded(table, dt), ids_cpu);
      Guarded out(Shape{c.tokens, c.cols}, dt);
      ops::embedding_forward(out.view(), to_gpu(table, dt), ids_gpu);
      EXPECT_TRUE(matches(out, ref, kExact));

      const Tensor dout = random_normal({c.tokens, c.cols}, seed++), dtable0 = random_normal(table.shape(), seed++);
      Tensor ref_dtable = dtable0.clone();
      ops::embedding_backward(ref_dtable, rounded(dout, dt), ids_cpu);
      Guarded dtable(dtable0, DType::f32);
      ops::embedding_backward(dtable.view(), to_gpu(dout, dt), ids_gpu);
      // Each row sums its tokens in token order on both; only the final += may round differently.
      EXPECT_TRUE(matches(dtable, ref_dtable, {1e-6, 1e-6}));
    }
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

TEST(CudaRows, GatherAndScatterRowsAreExact) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 100;
  for (DType dt : compute_dtypes())
    for (int64_t rows : {1, 7, 130}) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " rows=" << rows);
      const int64_t cols = 33, n = (rows + 1) / 2;
      // Distinct indices: every other row, reversed.
      std::vector<int32_t> index;
      for (int64_t i = 0; i < n; ++i) index.push_back(static_cast<int32_t>(rows - 1 - 2 * i));
      const Tensor src = random_normal({rows, cols}, seed++), rows_src = random_normal({n, cols}, seed++);
      Tensor ref_gather = Tensor::empty({n, cols}, DType::f32);
      ops::gather_rows(ref_gather, rounded(src, dt), i32_tensor(index));
      Guarded gathered(Shape{n, cols}, dt);
      ops::gather_rows(gathered.view(), to_gpu(src, dt), gpu_i32(index));
      EXPECT_TRUE(matches(gathered, ref_gather, kExact));

      Tensor ref_scatter = rounded(src, dt);  // untouched rows keep their values
      ops::scatter_rows(ref_scatter, rounded(rows_src, dt), i32_tensor(index));
      Guarded scattered(src, dt);
      ops::scatter_rows(scattered.view(), to_gpu(rows_src, dt), gpu_i32(index));
      EXPECT_TRUE(matches(scattered, ref_scatter, kExact));
    }
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

TEST(CudaLayout, PatchesAndPixelShuffleAreExact) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 200;
  struct PatchCase {
    int64_t batch, channels, height, width;
    int patch;
  };
  const PatchCase patch_cases[] = {{1, 1, 1, 1, 1}, {2, 3, 4, 6, 2}, {1, 3, 34, 17, 17}, {3, 2, 48, 32, 16}};
  struct ShuffleCase {
    int64_t batch, side, cols;
    int factor;
  };
  const ShuffleCase shuffle_cases[] = {{1, 1, 1, 1}, {2, 4, 3, 2}, {1, 14, 17, 2}, {2, 9, 5, 3}};
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

TEST(CudaRows, BadIndicesGiveNanRowsAndAreRecorded) {
  VLM_SKIP_WITHOUT_CUDA();
  ASSERT_TRUE(ops::check_index_errors(gpu()).ok());
  const Tensor table = to_gpu(random_normal({4, 3}, 1), DType::f32);
  Tensor out = Tensor::empty({3, 3}, DType::f32, gpu());
  ops::embedding_forward(out, table, gpu_i32({1, -2, 3}));
  const Tensor host = out.to(Device::cpu());
  EXPECT_TRUE(std::isfinite(host.data<float>()[0]));
  for (int c = 0; c < 3; ++c) EXPECT_TRUE(std::isnan(host.data<float>()[3 + c]));
  Status s = ops::check_index_errors(gpu());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("embedding_forward (ids): entry 1 = -2 is outside [0, 4)"), std::string::npos)
      << s.message();

  Tensor dst = Tensor::zeros({4, 3}, DType::f32, gpu());
  ops::scatter_rows(dst, to_gpu(random_normal({2, 3}, 2), DType::f32), gpu_i32({2, 2}));
  s = ops::check_index_errors(gpu());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("repeats an earlier index"), std::string::npos) << s.message();
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

}  // namespace
}  // namespace vlm::testing
