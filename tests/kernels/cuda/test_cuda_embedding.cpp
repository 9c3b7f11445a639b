// The embedding family on CUDA against the CPU reference: embedding forward (exact) and its deterministic
// accumulating backward (exact: both sum each id's rows in token order from 0 and add the sum once; short and long
// runs of one id, the training shape, misaligned rows, bad ids skipped and recorded, bitwise reproducible),
// gather/scatter rows (exact), and bad indices recorded, not aborted.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <utility>

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
      // Each row sums its tokens in token order from 0 on both, then adds the sum once: the same bits.
      EXPECT_TRUE(matches(dtable, ref_dtable, kExact));
    }
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

// `tokens` random ids in [0, vocab - 1) with `pad_count` of them, at random positions, replaced by the padding id
// vocab - 1: one run of exactly pad_count tokens, scattered in token order.
std::vector<int32_t> ids_with_padding(int64_t tokens, int64_t vocab, int64_t pad_count, uint64_t seed) {
  std::vector<int32_t> ids = random_ids(tokens, std::max<int64_t>(vocab - 1, 1), seed);
  std::vector<int64_t> positions(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) positions[static_cast<size_t>(t)] = t;
  Philox rng(seed + 1);
  for (int64_t t = tokens - 1; t > 0; --t)
    std::swap(positions[static_cast<size_t>(t)], positions[rng.uniform_int(static_cast<uint64_t>(t + 1))]);
  for (int64_t k = 0; k < pad_count; ++k) ids[static_cast<size_t>(positions[static_cast<size_t>(k)])] = vocab - 1;
  return ids;
}

// The CPU op over the in-range ids only (it aborts on a bad id, where the CUDA op skips the token): dtable0 + the
// rows of dout grouped by id.
Tensor reference_backward(const Tensor& dtable0, const Tensor& dout, const std::vector<int32_t>& ids) {
  const int64_t vocab = dtable0.dim(0), cols = dtable0.dim(1);
  std::vector<int32_t> kept_ids;
  for (int32_t id : ids)
    if (id >= 0 && id < vocab) kept_ids.push_back(id);
  Tensor kept = Tensor::empty({static_cast<int64_t>(kept_ids.size()), cols}, DType::f32);
  int64_t k = 0;
  for (size_t t = 0; t < ids.size(); ++t)
    if (ids[t] >= 0 && ids[t] < vocab)
      std::copy_n(dout.data<float>() + static_cast<int64_t>(t) * cols, cols, kept.data<float>() + cols * k++);
  Tensor ref = dtable0.clone();
  ops::embedding_backward(ref, kept, i32_tensor(kept_ids));
  return ref;
}

// The CUDA embedding_backward of random dout (stored in dt, `dout_offset` elements into its buffer) into a random
// dtable, against the CPU reference: exact.
::testing::AssertionResult backward_matches_cpu(const std::vector<int32_t>& ids, int64_t vocab, int64_t cols,
                                                DType dt, uint64_t seed, int64_t dout_offset = 0) {
  const int64_t tokens = static_cast<int64_t>(ids.size());
  const Tensor dout = random_normal({tokens, cols}, seed), dtable0 = random_normal({vocab, cols}, seed + 1);
  const Tensor ref = reference_backward(dtable0, rounded(dout, dt), ids);
  Guarded dtable(dtable0, DType::f32);
  ops::embedding_backward(dtable.view(), to_gpu_at_offset(dout, dt, dout_offset), gpu_i32(ids));
  return matches(dtable, ref, kExact);
}

TEST(CudaEmbedding, BackwardLongRunsMatchCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  struct Case {
    int64_t tokens, vocab, cols, pad_count;
  };
  // One id repeated: every token (8192, the training batch), the longest run a warp sums (32) and the shortest
  // queued run (33), runs across the 512-row staging chunks; odd, narrow and single columns (scalar loads,
  // partial column slices).
  const Case cases[] = {{8192, 3, 576, 8192}, {32, 5, 8, 32},     {33, 5, 8, 33},  {40, 2, 40, 33},
                        {1200, 50, 257, 1025}, {700, 40, 24, 513}, {2000, 7, 1, 1500}, {3000, 64, 576, 512}};
  uint64_t seed = 300;
  for (DType dt : compute_dtypes())
    for (const Case& c : cases)
      for (int64_t offset : {0, 1}) {  // offset 1: misaligned dout rows take the element loads
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " T=" << c.tokens << " V=" << c.vocab << " C="
                                          << c.cols << " pad=" << c.pad_count << " offset=" << offset);
        const std::vector<int32_t> ids = ids_with_padding(c.tokens, c.vocab, c.pad_count, seed++);
        EXPECT_TRUE(backward_matches_cpu(ids, c.vocab, c.cols, dt, seed++, offset));
      }
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

TEST(CudaEmbedding, BackwardTrainingShapeMatchesCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  // The training benchmark's shape: 8192 tokens of a 49152-id vocabulary, 576 columns. Ids skewed towards small
  // ones (vocab * u^4: id 0 about 550 times, a long tail of single tokens) plus 1000 padding tokens.
  const int64_t tokens = 8192, vocab = 49152, cols = 576;
  std::vector<int32_t> ids = ids_with_padding(tokens, vocab, 1000, 400);
  Philox rng(401);
  for (int32_t& id : ids)
    if (id != vocab - 1) id = static_cast<int32_t>(std::min<double>(vocab - 2, vocab * std::pow(rng.uniform(), 4.0)));
  for (DType dt : compute_dtypes()) {
    SCOPED_TRACE(dtype_label(dt));
    EXPECT_TRUE(backward_matches_cpu(ids, vocab, cols, dt, 402));
  }
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

TEST(CudaEmbedding, BackwardSkipsAndRecordsBadIds) {
  VLM_SKIP_WITHOUT_CUDA();
  ASSERT_TRUE(ops::check_index_errors(gpu()).ok());
  const int64_t vocab = 20, cols = 40;
  for (DType dt : compute_dtypes()) {
    SCOPED_TRACE(dtype_label(dt));
    // One bad id: named exactly; the other tokens are still summed.
    std::vector<int32_t> ids = random_ids(300, vocab, 500);
    ids[5] = -1;
    EXPECT_TRUE(backward_matches_cpu(ids, vocab, cols, dt, 501));
    Status s = ops::check_index_errors(gpu());
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("embedding_backward (ids): entry 5 = -1 is outside [0, 20)"), std::string::npos)
        << s.message();

    // Several bad ids (the extremes of i32, vocab itself) around a long run: which one is recorded is not fixed.
    ids = ids_with_padding(300, vocab, 100, 502);
    const std::pair<size_t, int32_t> bad[] = {{0, INT_MIN}, {7, INT_MAX}, {150, -7}, {299, 20}};
    for (const auto& [t, id] : bad) ids[t] = id;
    EXPECT_TRUE(backward_matches_cpu(ids, vocab, cols, dt, 503));
    s = ops::check_index_errors(gpu());
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("embedding_backward (ids)"), std::string::npos) << s.message();

    // Only bad ids: dtable is untouched.
    EXPECT_TRUE(backward_matches_cpu({-1, 20, 1000, -5}, vocab, cols, dt, 504));
    EXPECT_FALSE(ops::check_index_errors(gpu()).ok());
  }
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

TEST(CudaEmbedding, BackwardIsBitwiseReproducible) {
  VLM_SKIP_WITHOUT_CUDA();
  const int64_t tokens = 4096, vocab = 1000, cols = 576;
  const std::vector<int32_t> ids = ids_with_padding(tokens, vocab, 2000, 600);  // short runs and one long one
  const Tensor ids_gpu = gpu_i32(ids);
  for (DType dt : compute_dtypes()) {
    SCOPED_TRACE(dtype_label(dt));
    const Tensor dout = to_gpu(random_normal({tokens, cols}, 601, 3.f), dt);
    auto run = [&] {
      Tensor dtable = Tensor::zeros({vocab, cols}, DType::f32, gpu());
      ops::embedding_backward(dtable, dout, ids_gpu);
      return dtable.to(Device::cpu());
    };
    const Tensor first = run(), second = run();
    EXPECT_TRUE(bitwise_equal(first, second));
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
