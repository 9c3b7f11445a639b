// Turns per-sample hashes into duplicate clusters and a keep decision: exact matches (equal content hashes),
// image near-duplicates (pHash within a Hamming distance, through the multi-index), caption near-duplicates
// (MinHash estimated Jaccard >= a threshold, through LSH). Two ways to turn matched pairs into drops:
//  - transitive (default): every pair joins a union-find; each cluster keeps its first sample (the smallest index
//    in the given order, i.e. shard list order then order inside the shard) and drops the rest. A dropped sample's
//    kind is the strongest kind among its own matched pairs (exact > image > caption); the pair's other end is
//    `matched`, the cluster's kept first sample is `cluster`. On repetitive data a loose threshold chains samples:
//    A ~ B and B ~ C drop C even when A and C are far apart.
//  - star: greedy in record order, a sample is dropped only if it matches an earlier sample that is kept; `matched`
//    and `cluster` are that kept sample (the strongest kind's, the earliest on ties). A ~ B, B ~ C, A !~ C keeps A
//    and C. Every dropped sample is within the threshold of a sample that stays.
// Pure function of its inputs: the same records in the same order give the same result.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/dedup/near_index.h"
#include "data/dedup/sample_hashes.h"

namespace vlm {

enum class DedupClustering { transitive, star };
const char* dedup_clustering_name(DedupClustering c);              // "transitive", "star"
Expected<DedupClustering> parse_dedup_clustering(std::string_view name);  // invalid_argument naming the choices

struct DedupCriteria {
  bool exact = true;            // equal content hashes
  int phash_distance = -1;      // < 0: off; else pHash Hamming distance <= this (0..32)
  double caption_jaccard = 0;   // 0: off; else estimated caption Jaccard >= this, in (0, 1]
  bool drop_bad_images = false; // drop samples whose image does not decode (else they are kept and reported)
  DedupClustering clustering = DedupClustering::transitive;
  size_t bucket_cap = 4096;     // per index bucket (see near_index.h)

  bool uses_phash() const { return phash_distance >= 0; }
  bool uses_caption() const { return caption_jaccard > 0; }
  Status validate() const;  // invalid_argument naming the field
};

enum class DupKind : uint8_t { none = 0, caption = 1, image = 2, exact = 3, bad_image = 4 };
const char* dup_kind_name(DupKind kind);  // "none", "caption", "image", "exact", "bad_image"

struct DedupResult {
  std::vector<uint8_t> keep;           // per record: 1 kept, 0 dropped
  std::vector<uint32_t> cluster;       // per record: its cluster's first record (star: the kept record it matched)
  std::vector<DupKind> kind;           // per record: none for kept ones, else why it was dropped
  std::vector<uint32_t> matched;       // per dropped record: the other end of its strongest pair (bad_image: itself)
  uint64_t samples = 0, kept = 0;
  uint64_t dropped_exact = 0, dropped_image = 0, dropped_caption = 0, dropped_bad_image = 0;
  uint64_t bad_images = 0, no_image = 0, no_caption = 0;
  uint64_t pairs_exact = 0, pairs_image = 0, pairs_caption = 0;
  uint64_t clusters = 0;                   // clusters of size >= 2
  std::vector<uint64_t> cluster_size_histogram;  // [s] = clusters of size s (index 0 and 1 unused)
  IndexStats phash_index, caption_index;
};

DedupResult cluster_duplicates(const std::vector<SampleHashes>& records, const DedupCriteria& criteria);

}  // namespace vlm
