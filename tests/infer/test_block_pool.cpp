// BlockPool: reference counts, the LRU free queue, prefix-hash lookups and accounting; prefix keys (the
// adversarial image cases); the image-embedding cache's byte budget.
#include <gtest/gtest.h>

#include <string>

#include "infer/block_pool.h"
#include "infer/image_cache.h"
#include "infer/prefix_hash.h"

namespace vlm::infer {
namespace {

BlockHash key(uint64_t i) { return BlockHash{i, ~i}; }

TEST(BlockPool, AllocatesEveryBlockOnceThenRunsOut) {
  BlockPool pool(4);
  std::vector<int32_t> got;
  for (int i = 0; i < 4; ++i) got.push_back(*pool.allocate());
  EXPECT_FALSE(pool.allocate().has_value());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(pool.stats().used, 4);
  EXPECT_EQ(pool.stats().free, 0);
  pool.check_invariants();
}

TEST(BlockPool, SharedBlockIsFreedByItsLastHolder) {
  BlockPool pool(2);
  const int32_t b = *pool.allocate();
  pool.retain(b);
  EXPECT_EQ(pool.ref_count(b), 2);
  pool.release(b);
  EXPECT_EQ(pool.num_free(), 1);
  pool.release(b);
  EXPECT_EQ(pool.num_free(), 2);
  pool.check_invariants();
}

TEST(BlockPool, CachedBlocksAreFoundUntilEvictedLeastRecentFirst) {
  BlockPool pool(3);
  const int32_t a = *pool.allocate(), b = *pool.allocate(), c = *pool.allocate();
  pool.register_hash(a, key(1));
  pool.register_hash(b, key(2));
  pool.release(a);  // freed first: evicted first
  pool.release(b);
  BlockPoolStats s = pool.stats();
  EXPECT_EQ(s.cached, 2);
  EXPECT_EQ(s.free, 2);
  // A hit takes the block off the free queue and holds it.
  auto hit = pool.lookup(key(2));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(*hit, b);
  EXPECT_EQ(pool.ref_count(b), 1);
  EXPECT_FALSE(pool.lookup(key(3)).has_value());
  // The next allocation evicts a (its hash is gone).
  EXPECT_EQ(*pool.allocate(), a);
  EXPECT_FALSE(pool.lookup(key(1)).has_value());
  s = pool.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.evictions, 1);
  EXPECT_EQ(s.cached, 0);
  pool.release(c);
  pool.check_invariants();
}

TEST(BlockPool, FirstRegistrationOfAHashWins) {
  BlockPool pool(2);
  const int32_t a = *pool.allocate(), b = *pool.allocate();
  pool.register_hash(a, key(7));
  pool.register_hash(b, key(7));  // computed the same prefix concurrently
  EXPECT_TRUE(pool.is_cached(a));
  EXPECT_FALSE(pool.is_cached(b));
  EXPECT_EQ(*pool.lookup(key(7)), a);
  pool.clear_cache();
  EXPECT_FALSE(pool.lookup(key(7)).has_value());
  pool.check_invariants();
}

// Two encodings of the same size and leading bytes that differ only at the end.
std::string fake_png(char last) {
  std::string s = "\x89PNG\r\n\x1a\n";
  s.append(4000, 'x');
  s.back() = last;
  return s;
}

TEST(PrefixHash, DifferentImagesWithIdenticalTextNeverShare) {
  const std::string p = "size=64 crop=center mean=0.5 std=0.5";
  const ImageContentHash k1 = image_key(fake_png('a'), p), k2 = image_key(fake_png('b'), p);
  ASSERT_EQ(fake_png('a').size(), fake_png('b').size());
  EXPECT_NE(k1, k2);
  // The same block of text + placeholders after each image: the keys differ in every block of the chain.
  const std::vector<int32_t> tokens = {5, 9, 9, 9, 9, 6, 7, 8};
  const std::vector<int32_t> rows = {-1, 0, 1, 2, 3, -1, -1, -1};
  const BlockHash a = block_hash(root_block_hash(), tokens.data(), rows.data(), 8, {k1}, 4);
  const BlockHash b = block_hash(root_block_hash(), tokens.data(), rows.data(), 8, {k2}, 4);
  EXPECT_NE(a, b);
  const std::vector<int32_t> text = {1, 2, 3, 4};
  EXPECT_NE(block_hash(a, text.data(), nullptr, 4, {k1}, 4), block_hash(b, text.data(), nullptr, 4, {k2}, 4));
  // The same image (same bytes, same preprocessing) shares.
  EXPECT_EQ(a, block_hash(root_block_hash(), tokens.data(), rows.data(), 8, {image_key(fake_png('a'), p)}, 4));
  // The same bytes preprocessed differently do not.
  EXPECT_NE(k1, image_key(fake_png('a'), "size=32 crop=center mean=0.5 std=0.5"));
}

TEST(PrefixHash, TextTokensAndPlaceholdersNeverAlias) {
  // A placeholder row must not hash like any text token id, and rows of one image are distinct.
  const ImageContentHash k = image_key("img", "s");
  const std::vector<int32_t> tokens = {9, 9};
  const std::vector<int32_t> r01 = {0, 1}, r10 = {1, 0}, text = {-1, -1};
  const BlockHash h01 = block_hash(root_block_hash(), tokens.data(), r01.data(), 2, {k}, 4);
  EXPECT_NE(h01, block_hash(root_block_hash(), tokens.data(), r10.data(), 2, {k}, 4));
  EXPECT_NE(h01, block_hash(root_block_hash(), tokens.data(), text.data(), 2, {k}, 4));
  // The chain: the same block after different parents differs.
  EXPECT_NE(block_hash(key(1), tokens.data(), nullptr, 2, {}, 1), block_hash(key(2), tokens.data(), nullptr, 2, {}, 1));
}

TEST(ImageEmbeddingCache, KeepsWithinItsByteBudgetLeastRecentOut) {
  const int64_t entry = 4 * 8 * 4;  // f32 [4, 8]
  ImageEmbeddingCache cache(2 * entry);
  const Tensor t = Tensor::zeros({4, 8}, DType::f32);
  cache.put(image_key("a", ""), t);
  cache.put(image_key("b", ""), t);
  EXPECT_TRUE(cache.get(image_key("a", "")).has_value());  // a is now the most recent
  cache.put(image_key("c", ""), t);                        // evicts b
  EXPECT_FALSE(cache.get(image_key("b", "")).has_value());
  EXPECT_TRUE(cache.get(image_key("a", "")).has_value());
  EXPECT_TRUE(cache.get(image_key("c", "")).has_value());
  EXPECT_LE(cache.bytes(), 2 * entry);
  EXPECT_EQ(cache.hits(), 3);
  EXPECT_EQ(cache.misses(), 1);
  ImageEmbeddingCache tiny(entry - 1);  // an entry over the budget is not kept
  tiny.put(image_key("a", ""), t);
  EXPECT_EQ(tiny.size(), 0u);
}

}  // namespace
}  // namespace vlm::infer
