// The near-duplicate indexes never compare all pairs, yet must find what an all-pairs scan finds: multi-index
// hashing against phash_all_pairs on random hashes with planted close pairs (every distance, every block layout),
// MinHash LSH against a brute-force scan of estimated Jaccard, union-find, and the edge cases (empty, one entry, all
// identical, excluded entries, capped buckets).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/philox.h"
#include "data/dedup/minhash.h"
#include "data/dedup/near_index.h"
#include "data/dedup/phash.h"
#include "dedup_test_util.h"

namespace vlm {
namespace {

// Pairs as (later, earlier) -> components, so identical-value pairs (reported against the first occurrence) and
// verified pairs compare by the clusters they imply.
std::vector<uint32_t> components(size_t n, const std::vector<MatchedPair>& pairs) {
  UnionFind uf(n);
  for (const auto& p : pairs) uf.unite(p.later, p.earlier);
  std::vector<uint32_t> c(n);
  for (uint32_t i = 0; i < n; ++i) c[i] = uf.find(i);
  return c;
}

std::set<std::pair<uint32_t, uint32_t>> pair_set(const std::vector<MatchedPair>& pairs) {
  std::set<std::pair<uint32_t, uint32_t>> s;
  for (const auto& p : pairs) s.insert({p.later, p.earlier});
  return s;
}

// Random 64-bit hashes; every 4th is a copy of an earlier one with 0..12 bits flipped, some are exact copies.
std::vector<uint64_t> planted_hashes(size_t n, uint64_t seed) {
  Philox rng(seed, 1);
  std::vector<uint64_t> h(n);
  for (size_t i = 0; i < n; ++i) {
    if (i > 0 && i % 4 == 0) {
      uint64_t v = h[rng.uniform_int(i)];
      const int flips = static_cast<int>(rng.uniform_int(13));
      for (int f = 0; f < flips; ++f) v ^= uint64_t{1} << rng.uniform_int(64);
      h[i] = v;
    } else {
      h[i] = (uint64_t{rng.next_u32()} << 32) | rng.next_u32();
    }
  }
  return h;
}

TEST(UnionFind, RootIsSmallestMember) {
  UnionFind uf(6);
  EXPECT_TRUE(uf.unite(5, 3));
  EXPECT_TRUE(uf.unite(3, 4));
  EXPECT_FALSE(uf.unite(4, 5));
  EXPECT_TRUE(uf.unite(4, 1));
  EXPECT_EQ(uf.find(5), 1u);
  EXPECT_EQ(uf.find(0), 0u);
  EXPECT_EQ(uf.find(2), 2u);
}

TEST(PhashIndex, FindsExactlyTheAllPairsClusters) {
  for (uint64_t seed : {1, 2}) {
    const auto hashes = planted_hashes(3000, seed);
    for (int k : {0, 1, 4, 8, 10, 12}) {
      const auto reference = phash_all_pairs(hashes, {}, k);
      for (int blocks : {0, std::max(1, (k + 2) / 3), k + 1}) {  // radius k / blocks <= 3
        PhashIndexOptions o;
        o.max_distance = k;
        o.blocks = blocks;
        IndexStats stats;
        const auto found = phash_near_pairs(hashes, {}, o, &stats);
        // Every reported pair is within k, and the clusters equal the all-pairs clusters.
        for (const auto& p : found) ASSERT_LE(hamming_distance(hashes[p.later], hashes[p.earlier]), k);
        ASSERT_EQ(components(hashes.size(), found), components(hashes.size(), reference))
            << "k " << k << " blocks " << blocks << " (used " << stats.blocks << ")";
        // Without identical values the verified pairs are exactly the all-pairs set.
        if (stats.identical_matches == 0) {
          EXPECT_EQ(pair_set(found), pair_set(reference));
        }
        EXPECT_EQ(stats.capped_buckets, 0u);
        // The automatic layout looks at far fewer pairs than all of them.
        if (blocks == 0) {
          EXPECT_LT(stats.candidates_checked, hashes.size() * (hashes.size() - 1) / 2 / 5) << "k " << k;
        }
      }
    }
  }
}

TEST(PhashIndex, DistinctValuesGiveTheSameVerifiedPairs) {
  auto hashes = planted_hashes(2000, 9);
  std::sort(hashes.begin(), hashes.end());
  hashes.erase(std::unique(hashes.begin(), hashes.end()), hashes.end());
  PhashIndexOptions o;
  o.max_distance = 6;
  IndexStats stats;
  EXPECT_EQ(pair_set(phash_near_pairs(hashes, {}, o, &stats)), pair_set(phash_all_pairs(hashes, {}, 6)));
  EXPECT_EQ(stats.identical_matches, 0u);
}

TEST(PhashIndex, EdgeCases) {
  PhashIndexOptions o;
  EXPECT_TRUE(phash_near_pairs({}, {}, o).empty());
  EXPECT_TRUE(phash_near_pairs({42}, {}, o).empty());
  // All identical: everyone matches the first, outside the index.
  IndexStats stats;
  const auto same = phash_near_pairs(std::vector<uint64_t>(100, 7), {}, o, &stats);
  EXPECT_EQ(same.size(), 99u);
  for (const auto& p : same) EXPECT_EQ(p.earlier, 0u);
  EXPECT_EQ(stats.distinct_values, 1u);
  // Excluded entries never match.
  const auto excluded = phash_near_pairs({5, 5, 5}, {1, 0, 1}, o);
  ASSERT_EQ(excluded.size(), 1u);
  EXPECT_EQ(excluded[0].later, 2u);
  EXPECT_EQ(excluded[0].earlier, 0u);
}

TEST(PhashIndex, CappedBucketsAreCounted) {
  // 200 distinct hashes sharing their high 48 bits all land in the same buckets of most blocks.
  std::vector<uint64_t> hashes;
  for (uint64_t i = 0; i < 200; ++i) hashes.push_back((0xabcdefull << 40) | (i * 2654435761ull & 0xffff));
  PhashIndexOptions o;
  o.max_distance = 3;
  o.blocks = 4;
  o.bucket_cap = 16;
  IndexStats stats;
  (void)phash_near_pairs(hashes, {}, o, &stats);
  EXPECT_GT(stats.capped_buckets, 0u);
  EXPECT_GT(stats.skipped_insertions, 0u);
}

TEST(MinHashIndex, MatchesBruteForceOnPlantedCaptions) {
  constexpr int kPerm = 128;
  const MinHasher hasher(kPerm, 11);
  Philox rng(5, 0);
  std::vector<std::string> captions;
  for (int i = 0; i < 1500; ++i)
    captions.push_back(i % 3 == 2 ? testing::caption_near_duplicate(captions[rng.uniform_int(captions.size())], rng)
                                  : testing::random_caption(rng));
  std::vector<uint32_t> sig(captions.size() * kPerm);
  for (size_t i = 0; i < captions.size(); ++i) ASSERT_TRUE(hasher.signature(captions[i], sig.data() + i * kPerm));
  for (double t : {0.5, 0.7}) {
    MinHashIndexOptions o;
    o.threshold = t;
    IndexStats stats;
    const auto found = minhash_near_pairs(sig, kPerm, {}, o, &stats);
    // No false positives: every reported pair is verified.
    for (const auto& p : found)
      ASSERT_GE(minhash_jaccard(sig.data() + p.later * kPerm, sig.data() + p.earlier * kPerm, kPerm), t - 1e-12);
    // Recall at the cluster level (identical signatures are reported against their first occurrence only): the
    // brute-force pairs whose ends share a cluster. LSH misses are rare: the layout targets 95% at J = t exactly.
    const auto clusters = components(captions.size(), found);
    size_t brute = 0, joined = 0;
    for (uint32_t i = 0; i < captions.size(); ++i)
      for (uint32_t j = 0; j < i; ++j)
        if (minhash_jaccard(sig.data() + i * kPerm, sig.data() + j * kPerm, kPerm) >= t) {
          ++brute;
          joined += clusters[i] == clusters[j];
        }
    ASSERT_GT(brute, 300u);
    EXPECT_GE(static_cast<double>(joined), 0.99 * static_cast<double>(brute)) << "t " << t;
    EXPECT_LT(stats.candidates_checked, captions.size() * captions.size() / 20);
  }
}

TEST(MinHashIndex, EdgeCases) {
  MinHashIndexOptions o;
  EXPECT_TRUE(minhash_near_pairs({}, 8, {}, o).empty());
  EXPECT_TRUE(minhash_near_pairs(std::vector<uint32_t>(8, 1), 8, {}, o).empty());
  IndexStats stats;
  const auto same = minhash_near_pairs(std::vector<uint32_t>(8 * 50, 3), 8, {}, o, &stats);
  EXPECT_EQ(same.size(), 49u);
  EXPECT_EQ(stats.identical_matches, 49u);
  std::vector<uint8_t> valid(50, 0);
  EXPECT_TRUE(minhash_near_pairs(std::vector<uint32_t>(8 * 50, 3), 8, valid, o).empty());
}

}  // namespace
}  // namespace vlm
