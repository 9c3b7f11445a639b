// Clustering of matched pairs: transitive (union-find) against star (drop only what matches a kept sample) on planted
// chains, where they differ (A ~ B, B ~ C, A !~ C: transitive drops B and C, star drops only B), against an all-pairs
// reference of the star rule on random hashes, and their shared bookkeeping (kinds, matched, cluster sizes).
#include <gtest/gtest.h>

#include "core/philox.h"
#include "data/dedup/dedup_cluster.h"
#include "data/dedup/phash.h"

namespace vlm {
namespace {

SampleHashes image_record(uint64_t phash, int i) {
  SampleHashes h;
  h.key = str("k", i);
  h.image = SampleImageState::ok;
  h.content = ImageContentHash{static_cast<uint64_t>(i) + 1, 7};  // distinct bytes
  h.phash = phash;
  return h;
}

DedupCriteria phash_only(int k, DedupClustering c) {
  DedupCriteria d;
  d.exact = false;
  d.phash_distance = k;
  d.clustering = c;
  return d;
}

TEST(DedupCluster, PlantedChainTransitiveDropsTheChainStarOnlyNeighboursOfKeptSamples) {
  // A = 0, B = A + 4 bits, C = B + 4 other bits: d(A,B) = d(B,C) = 4, d(A,C) = 8; k = 5.
  const uint64_t a = 0, b = 0xFull, c = 0xFFull;
  ASSERT_EQ(hamming_distance(a, c), 8);
  const std::vector<SampleHashes> records = {image_record(a, 0), image_record(b, 1), image_record(c, 2)};
  const DedupResult t = cluster_duplicates(records, phash_only(5, DedupClustering::transitive));
  EXPECT_EQ(t.keep, (std::vector<uint8_t>{1, 0, 0}));
  EXPECT_EQ(t.cluster, (std::vector<uint32_t>{0, 0, 0}));
  EXPECT_EQ(t.dropped_image, 2u);
  const DedupResult s = cluster_duplicates(records, phash_only(5, DedupClustering::star));
  EXPECT_EQ(s.keep, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(s.cluster, (std::vector<uint32_t>{0, 0, 2}));
  EXPECT_EQ(s.kind[1], DupKind::image);
  EXPECT_EQ(s.matched[1], 0u);
  EXPECT_EQ(s.dropped_image, 1u);
  EXPECT_EQ(s.clusters, 1u);
  EXPECT_EQ(s.pairs_image, t.pairs_image);  // the same pairs were found; only the clustering differs

  // A chain of 9, each 3 bits from the last: transitive keeps 1, star keeps every other one.
  std::vector<SampleHashes> chain;
  for (int i = 0; i < 9; ++i) chain.push_back(image_record(i == 0 ? 0 : ~0ull >> (64 - 3 * i), i));
  const DedupResult tc = cluster_duplicates(chain, phash_only(3, DedupClustering::transitive));
  const DedupResult sc = cluster_duplicates(chain, phash_only(3, DedupClustering::star));
  EXPECT_EQ(tc.kept, 1u);
  EXPECT_EQ(tc.cluster_size_histogram.size(), 10u);
  EXPECT_EQ(tc.cluster_size_histogram[9], 1u);
  EXPECT_EQ(sc.kept, 5u);
  for (uint32_t i = 0; i < 9; ++i) EXPECT_EQ(sc.keep[i], i % 2 == 0) << i;
  EXPECT_EQ(sc.clusters, 4u);  // 0+1, 2+3, 4+5, 6+7; 8 alone
  EXPECT_EQ(sc.cluster_size_histogram[2], 4u);
}

// The star rule by brute force: in order, drop a record if any kept earlier record is within k (the strongest kind
// first; here all pairs are image pairs, so the earliest such kept record).
TEST(DedupCluster, StarEqualsAllPairsGreedyOnRandomHashes) {
  Philox rng(5, 0);
  std::vector<SampleHashes> records;
  std::vector<uint64_t> base(12);
  for (auto& b : base) b = rng.next_u64();
  for (int i = 0; i < 400; ++i) {
    uint64_t h = base[rng.uniform_int(base.size())];
    for (int f = static_cast<int>(rng.uniform_int(9)); f > 0; --f) h ^= 1ull << rng.uniform_int(64);
    records.push_back(image_record(h, i));
  }
  const int k = 6;
  const DedupResult s = cluster_duplicates(records, phash_only(k, DedupClustering::star));
  std::vector<uint8_t> keep(records.size(), 1);
  for (size_t i = 0; i < records.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (keep[j] && hamming_distance(records[i].phash, records[j].phash) <= k) {
        keep[i] = 0;
        EXPECT_EQ(s.matched[i], j) << i;
        break;
      }
  EXPECT_EQ(s.keep, keep);
  // Every dropped record is within k of a kept one; transitive drops at least as many.
  for (size_t i = 0; i < records.size(); ++i)
    if (!s.keep[i]) {
      EXPECT_TRUE(s.keep[s.cluster[i]]);
      EXPECT_LE(hamming_distance(records[i].phash, records[s.cluster[i]].phash), k);
    }
  const DedupResult t = cluster_duplicates(records, phash_only(k, DedupClustering::transitive));
  EXPECT_LE(t.kept, s.kept);
  EXPECT_LT(t.kept, s.kept) << "these hashes chain: the modes must differ";
}

TEST(DedupCluster, StarKindsExactBeatsImageAndBadImagesAttachNothing) {
  // 0 and 2 share bytes (exact) and 1 is a near image of 0; 3 is a bad image, 4 an exact copy of it.
  std::vector<SampleHashes> r = {image_record(0, 0), image_record(1, 1), image_record(0, 2)};
  r[2].content = r[0].content;
  SampleHashes bad;
  bad.key = "bad";
  bad.image = SampleImageState::bad_image;
  bad.content = ImageContentHash{99, 99};
  r.push_back(bad);
  r.push_back(bad);
  DedupCriteria c = phash_only(2, DedupClustering::star);
  c.exact = true;
  c.drop_bad_images = true;
  const DedupResult s = cluster_duplicates(r, c);
  EXPECT_EQ(s.keep, (std::vector<uint8_t>{1, 0, 0, 0, 0}));
  EXPECT_EQ(s.kind[1], DupKind::image);
  EXPECT_EQ(s.kind[2], DupKind::exact);  // image and exact pairs to the kept 0: the stronger names it
  EXPECT_EQ(s.kind[3], DupKind::bad_image);
  EXPECT_EQ(s.kind[4], DupKind::bad_image);  // its exact twin was dropped, not kept: nothing to attach to
  EXPECT_EQ(s.dropped_bad_image, 2u);
  EXPECT_EQ(*parse_dedup_clustering("star"), DedupClustering::star);
  EXPECT_EQ(*parse_dedup_clustering("transitive"), DedupClustering::transitive);
  auto bad_name = parse_dedup_clustering("chain");
  ASSERT_FALSE(bad_name.ok());
  EXPECT_NE(bad_name.status().message().find("transitive or star"), std::string::npos);
}

}  // namespace
}  // namespace vlm
