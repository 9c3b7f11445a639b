// Near-duplicate indexes that never compare all pairs, and the union-find that turns matched pairs into clusters.
//
// pHash (Hamming distance <= k): multi-index hashing (Norouzi, Punjani & Fleet 2012). The 64 bits are split into m
// contiguous blocks; by pigeonhole, two hashes within distance k agree within distance floor(k / m) on at least one
// block. With m = k + 1 (the classic scheme) that radius is 0: bucket every hash by each block's exact value and
// verify the bucket mates. Fewer, wider blocks with a small radius probe more buckets but find far fewer random
// candidates on large sets; `blocks = 0` picks the m in [1, k + 1] with the lowest estimated cost (probes plus
// candidates expected for uniform hashes at this set size). Both choices find exactly the pairs within distance k
// (tests compare with all pairs on random data), unless a bucket overflows (below).
// MinHash LSH (Jaccard >= t): `bands` bands of `rows` slots; signatures equal on a whole band share a bucket; every
// bucket mate is verified by the estimated Jaccard (fraction of equal slots) >= t. Probabilistic: a pair of true
// Jaccard s is a candidate with probability 1 - (1 - s^rows)^bands.
//
// Both indexes first group identical values (equal hashes, equal signatures) in linear time: those are matched
// to the first occurrence without entering the index, so a million blank images cost nothing. The index then holds
// distinct values only, and is built in input order: each value queries the earlier ones, then is inserted, so a
// pair is verified once and the output does not depend on threads or hash-map order.
// Degenerate inputs (many distinct but close values, e.g. near-blank images with noise) can still fill one bucket:
// a bucket holds at most `bucket_cap` entries, later ones are not inserted into it (they still query it and are
// inserted into their other buckets), and IndexStats counts the capped buckets and the skipped insertions, so a
// report can say recall may be lower there.
// Not thread-safe; pure functions of their inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vlm {

// Disjoint sets over [0, n); the root of a set is always its smallest element, so "the first sample of a cluster"
// is find(i).
class UnionFind {
 public:
  explicit UnionFind(size_t n = 0);
  uint32_t find(uint32_t x);
  // Joins the sets of a and b; returns false when they were already joined.
  bool unite(uint32_t a, uint32_t b);
  size_t size() const { return parent_.size(); }

 private:
  std::vector<uint32_t> parent_;
};

// A verified near-duplicate pair: `later` and `earlier` index the input, earlier < later.
struct MatchedPair {
  uint32_t later = 0, earlier = 0;
  double score = 0;  // Hamming distance (pHash) or estimated Jaccard (MinHash)
};

struct IndexStats {
  uint64_t distinct_values = 0;     // entries that entered the index (after grouping identical values)
  uint64_t identical_matches = 0;   // entries matched to an identical earlier value
  uint64_t candidates_checked = 0;  // verifications (distinct candidate pairs)
  uint64_t pairs_matched = 0;       // verified pairs among distinct values
  uint64_t capped_buckets = 0;      // buckets that reached bucket_cap
  uint64_t skipped_insertions = 0;  // (entry, bucket) insertions refused by a full bucket
  int blocks = 0, radius = 0;       // pHash: the multi-index layout used
  int bands = 0, rows = 0;          // MinHash: the LSH layout used
};

struct PhashIndexOptions {
  int max_distance = 8;      // k, 0..32
  int blocks = 0;            // m, 1..k+1; 0: chosen from the cost estimate
  size_t bucket_cap = 4096;  // entries per bucket, >= 1
};

// The block count blocks = 0 resolves to for `n` distinct hashes.
int phash_auto_blocks(int max_distance, size_t n);

// Every entry within `max_distance` of an earlier one is reported at least once (pairs of identical hashes as
// (i, first occurrence), others as verified pairs of first occurrences). `valid[i] == 0` excludes entry i
// (empty `valid`: all entries).
std::vector<MatchedPair> phash_near_pairs(const std::vector<uint64_t>& hashes, const std::vector<uint8_t>& valid,
                                          const PhashIndexOptions& options, IndexStats* stats = nullptr);

struct MinHashIndexOptions {
  double threshold = 0.8;  // estimated Jaccard needed, (0, 1]
  int bands = 0, rows = 0;  // 0: lsh_params_for_threshold(threshold, num_perm)
  size_t bucket_cap = 4096;
};

// `signatures` holds n * num_perm slots (row i = entry i); entries with valid[i] == 0 are excluded.
std::vector<MatchedPair> minhash_near_pairs(const std::vector<uint32_t>& signatures, int num_perm,
                                            const std::vector<uint8_t>& valid, const MinHashIndexOptions& options,
                                            IndexStats* stats = nullptr);

// The reference both indexes are tested against: every valid pair (j < i) with distance <= max_distance.
std::vector<MatchedPair> phash_all_pairs(const std::vector<uint64_t>& hashes, const std::vector<uint8_t>& valid,
                                         int max_distance);

}  // namespace vlm
