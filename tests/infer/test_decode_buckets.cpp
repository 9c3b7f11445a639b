// The CUDA-graph buckets of decode steps (infer/decode_graphs.h): every batch and context maps to the smallest
// bucket holding it, within the caps, and padding stays bounded.
#include <gtest/gtest.h>

#include <algorithm>

#include "infer/decode_graphs.h"

namespace vlm::infer {
namespace {

TEST(DecodeBuckets, BatchBucketIsTheSmallestHoldingTheBatch) {
  EXPECT_EQ(decode_batch_bucket(1, 256), 1);
  EXPECT_EQ(decode_batch_bucket(3, 256), 4);
  EXPECT_EQ(decode_batch_bucket(9, 256), 16);
  EXPECT_EQ(decode_batch_bucket(64, 256), 64);
  EXPECT_EQ(decode_batch_bucket(65, 256), 80);
  EXPECT_EQ(decode_batch_bucket(128, 256), 128);
  EXPECT_EQ(decode_batch_bucket(129, 256), 160);
  EXPECT_EQ(decode_batch_bucket(250, 256), 256);
  EXPECT_EQ(decode_batch_bucket(100, 100), 100);  // capped at the engine's sequence limit
  EXPECT_EQ(decode_batch_bucket(0, 256), 0);
  EXPECT_EQ(decode_batch_bucket(257, 256), 0);
  int previous = 0;
  for (int b = 1; b <= 512; ++b) {
    const int k = decode_batch_bucket(b, 512);
    ASSERT_GE(k, b);
    ASSERT_GE(k, previous);
    // Padding: under twice the batch up to 8 rows, then under 8 rows or a quarter of the batch.
    if (b <= 8) {
      ASSERT_LT(k, 2 * b) << b;
    } else {
      ASSERT_LT(k - b, std::max(8, b / 4 + 1)) << b;
    }
    previous = k;
  }
}

TEST(DecodeBuckets, ContextBucketIsAPowerOfTwoWithinTheContext) {
  EXPECT_EQ(decode_context_bucket(1, 16, 8192), 256);
  EXPECT_EQ(decode_context_bucket(256, 16, 8192), 256);
  EXPECT_EQ(decode_context_bucket(257, 16, 8192), 512);
  EXPECT_EQ(decode_context_bucket(640, 16, 8192), 1024);
  EXPECT_EQ(decode_context_bucket(8192, 16, 8192), 8192);
  EXPECT_EQ(decode_context_bucket(8193, 16, 8192), 0);
  EXPECT_EQ(decode_context_bucket(700, 16, 1000), 1008);  // capped at the context, rounded up to a block
  EXPECT_EQ(decode_context_bucket(90, 4, 96), 96);
  EXPECT_EQ(decode_context_bucket(0, 16, 8192), 0);
  for (int len = 1; len <= 4000; len += 7) {
    const int c = decode_context_bucket(len, 48, 4000);
    ASSERT_GE(c, len);
    ASSERT_EQ(c % 48, 0) << len;
  }
}

}  // namespace
}  // namespace vlm::infer
