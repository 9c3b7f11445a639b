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

TEST(DecodeBuckets, BucketListsCoverEveryBatchAndContextOnce) {
  EXPECT_EQ(decode_batch_buckets(1), std::vector<int>({1}));
  EXPECT_EQ(decode_batch_buckets(20), std::vector<int>({1, 2, 4, 8, 16, 20}));
  EXPECT_TRUE(decode_batch_buckets(0).empty());
  for (int max_batch : {1, 7, 100, 128, 256, 300}) {
    std::vector<int> want;
    for (int b = 1; b <= max_batch; ++b)
      if (want.empty() || want.back() != decode_batch_bucket(b, max_batch)) want.push_back(decode_batch_bucket(b, max_batch));
    EXPECT_EQ(decode_batch_buckets(max_batch), want) << max_batch;
  }
  EXPECT_EQ(decode_batch_buckets(256).size(), 19u);

  EXPECT_EQ(decode_context_bucket_starts(1, 8192, 16, 8192), std::vector<int>({1, 257, 513, 1025, 2049, 4097}));
  EXPECT_EQ(decode_context_bucket_starts(513, 639, 16, 8192), std::vector<int>({513}));  // prompt 512 + 128
  EXPECT_EQ(decode_context_bucket_starts(300, 300, 16, 8192), std::vector<int>({300}));
  EXPECT_TRUE(decode_context_bucket_starts(0, 100, 16, 8192).empty());
  EXPECT_TRUE(decode_context_bucket_starts(200, 100, 16, 8192).empty());
  EXPECT_TRUE(decode_context_bucket_starts(100, 9000, 16, 8192).empty());
  // Any block size: the starts' buckets are distinct and hold every context of the range.
  for (int block : {4, 16, 48}) {
    const std::vector<int> starts = decode_context_bucket_starts(5, 3000, block, 4000);
    std::vector<int> buckets;
    for (int s : starts) buckets.push_back(decode_context_bucket(s, block, 4000));
    ASSERT_TRUE(std::is_sorted(buckets.begin(), buckets.end()));
    ASSERT_EQ(std::adjacent_find(buckets.begin(), buckets.end()), buckets.end()) << block;
    for (int len = 5; len <= 3000; ++len)
      ASSERT_NE(std::find(buckets.begin(), buckets.end(), decode_context_bucket(len, block, 4000)), buckets.end())
          << "block " << block << " context " << len;
  }
}

}  // namespace
}  // namespace vlm::infer
