// Embedding lookup and its scatter-add backward, scatter_rows / gather_rows: exact data movement.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  Philox rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(vocab)));
  return ids;
}

struct EmbCase {
  int64_t tokens, vocab, cols;
};
const EmbCase kCases[] = {{1, 1, 1}, {3, 17, 5}, {33, 7, 64}, {17, 1000, 33}, {0, 4, 3}, {500, 50, 96}};

TEST(Embedding, ForwardCopiesRows) {
  uint64_t seed = 1;
  for (const EmbCase& c : kCases) {
    SCOPED_TRACE(::testing::Message() << c.tokens << " tokens, " << c.vocab << "x" << c.cols);
    Tensor table = random_normal({c.vocab, c.cols}, seed++), out = nan_tensor({c.tokens, c.cols});
    const std::vector<int32_t> ids = random_ids(c.tokens, c.vocab, seed++);
    ops::embedding_forward(out, table, i32_tensor(ids));
    Tensor expect = Tensor::empty(out.shape(), DType::f32);
    for (int64_t t = 0; t < c.tokens; ++t)
      for (int64_t k = 0; k < c.cols; ++k)
        expect.data<float>()[t * c.cols + k] = table.item_f32(ids[static_cast<size_t>(t)] * c.cols + k);
    EXPECT_TRUE(bitwise_equal(out, expect));
  }
}

TEST(Embedding, BackwardScatterAddsAndAccumulates) {
  uint64_t seed = 100;
  for (const EmbCase& c : kCases) {
    SCOPED_TRACE(::testing::Message() << c.tokens << " tokens, " << c.vocab << "x" << c.cols);
    const std::vector<int32_t> ids = random_ids(c.tokens, c.vocab, seed++);  // repeats when tokens > vocab
    Tensor dout = random_normal({c.tokens, c.cols}, seed++);
    Doubles grad(static_cast<size_t>(c.vocab * c.cols), 0.0);
    const Doubles d = to_doubles(dout);
    for (int64_t t = 0; t < c.tokens; ++t)
      for (int64_t k = 0; k < c.cols; ++k)
        grad[static_cast<size_t>(ids[static_cast<size_t>(t)] * c.cols + k)] += d[static_cast<size_t>(t * c.cols + k)];
    Tensor dtable0 = random_normal({c.vocab, c.cols}, seed++), dtable = dtable0.clone();
    for (int call = 1; call <= 2; ++call) {
      ops::embedding_backward(dtable, dout, i32_tensor(ids));
      EXPECT_TRUE(all_close(dtable, from_doubles(axpy(to_doubles(dtable0), grad, call), dtable.shape()), 1e-5, 1e-5))
          << "call " << call;
    }
  }
}

TEST(Embedding, IdOutOfRangeAborts) {
  use_threadsafe_death_tests();
  Tensor table = random_normal({4, 3}, 1), out = nan_tensor({2, 3});
  EXPECT_DEATH(ops::embedding_forward(out, table, i32_tensor({1, 4})),
               "ops::embedding_forward: ids\\[1\\] = 4 is outside \\[0, 4\\)");
  EXPECT_DEATH(ops::embedding_backward(table, out, i32_tensor({-1, 0})), "ops::embedding_backward: ids\\[0\\] = -1");
}

TEST(Rows, ScatterAndGatherMoveRowsExactly) {
  const int64_t rows = 11, cols = 7;
  Tensor src = random_normal({4, cols}, 5), base = random_normal({rows, cols}, 6);
  const std::vector<int32_t> index = {9, 0, 4, 10};
  Tensor out = base.clone();
  ops::scatter_rows(out, src, i32_tensor(index));
  Tensor expect = base.clone();
  for (size_t i = 0; i < index.size(); ++i)
    for (int64_t k = 0; k < cols; ++k)
      expect.data<float>()[index[i] * cols + k] = src.item_f32(static_cast<int64_t>(i) * cols + k);
  EXPECT_TRUE(bitwise_equal(out, expect));  // rows not indexed keep their values

  Tensor back = nan_tensor({4, cols});
  ops::gather_rows(back, out, i32_tensor(index));  // the adjoint recovers src
  EXPECT_TRUE(bitwise_equal(back, src));

  Tensor repeated = nan_tensor({3, cols});  // gather may repeat rows
  ops::gather_rows(repeated, base, i32_tensor({2, 2, 0}));
  for (int64_t k = 0; k < cols; ++k) {
    EXPECT_EQ(repeated.item_f32(k), base.item_f32(2 * cols + k));
    EXPECT_EQ(repeated.item_f32(cols + k), base.item_f32(2 * cols + k));
    EXPECT_EQ(repeated.item_f32(2 * cols + k), base.item_f32(k));
  }
}

TEST(Rows, ScatterRejectsRepeatedOrOutOfRangeIndex) {
  use_threadsafe_death_tests();
  Tensor src = random_normal({2, 3}, 1), out = nan_tensor({5, 3});
  EXPECT_DEATH(ops::scatter_rows(out, src, i32_tensor({3, 3})), "ops::scatter_rows: index\\[1\\] = 3 repeats");
  EXPECT_DEATH(ops::scatter_rows(out, src, i32_tensor({0, 5})), "ops::scatter_rows: index\\[1\\] = 5 is outside");
  Tensor dst = nan_tensor({2, 3});
  EXPECT_DEATH(ops::gather_rows(dst, out, i32_tensor({0, -2})), "ops::gather_rows: index\\[1\\] = -2 is outside");
}

}  // namespace
}  // namespace vlm::testing
