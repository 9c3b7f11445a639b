// Union-find, multi-index hashing for pHash and banded LSH for MinHash (see near_index.h).
#include "data/dedup/near_index.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <unordered_map>

#include "core/status.h"
#include "data/dedup/minhash.h"
#include "data/dedup/phash.h"
#include "data/io/content_hash.h"

namespace vlm {

UnionFind::UnionFind(size_t n) : parent_(n) {
  VLM_CHECK(n <= std::numeric_limits<uint32_t>::max(), "UnionFind: ", n, " elements");
  for (size_t i = 0; i < n; ++i) parent_[i] = static_cast<uint32_t>(i);
}

uint32_t UnionFind::find(uint32_t x) {
  while (parent_[x] != x) {
    parent_[x] = parent_[parent_[x]];  // path halving
    x = parent_[x];
  }
  return x;
}

bool UnionFind::unite(uint32_t a, uint32_t b) {
  a = find(a);
  b = find(b);
  if (a == b) return false;
  if (a < b) parent_[b] = a;
  else parent_[a] = b;
  return true;
}

namespace {

// Buckets of one block or band: value -> entries (indices into the distinct list), capped.
class BucketTable {
 public:
  const std::vector<uint32_t>* find(uint64_t key) const {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second;
  }
  void insert(uint64_t key, uint32_t entry, size_t cap, IndexStats& stats) {
    std::vector<uint32_t>& bucket = map_[key];
    if (bucket.size() >= cap) {
      ++stats.skipped_insertions;
      return;
    }
    bucket.push_back(entry);
    if (bucket.size() == cap) ++stats.capped_buckets;
  }

 private:
  std::unordered_map<uint64_t, std::vector<uint32_t>> map_;
};

double binomial_ball(int width, int radius) {  // sum_{i <= radius} C(width, i)
  double total = 0, term = 1;
  for (int i = 0; i <= radius && i <= width; ++i) {
    total += term;
    term = term * (width - i) / (i + 1);
  }
  return total;
}

// Calls fn(v') for every v' within Hamming distance `radius` of `value` over the low `width` bits.
void for_each_within(uint64_t value, int width, int radius, int first_bit, const std::function<void(uint64_t)>& fn) {
  fn(value);
  if (radius == 0) return;
  for (int b = first_bit; b < width; ++b) for_each_within(value ^ (uint64_t{1} << b), width, radius - 1, b + 1, fn);
}

}  // namespace

int phash_auto_blocks(int max_distance, size_t n) {
  VLM_CHECK(max_distance >= 0 && max_distance <= 32, "pHash index: max_distance ", max_distance, " not in [0, 32]");
  int best = max_distance + 1;
  double best_cost = std::numeric_limits<double>::infinity();
  for (int m = max_distance + 1; m >= 1; --m) {
    const int width = 64 / m, radius = max_distance / m;
    const double probes = m * binomial_ball(width, radius);
    const double cost = probes * (1.0 + static_cast<double>(n) / std::ldexp(1.0, width));
    if (cost < best_cost) best_cost = cost, best = m;
  }
  return best;
}

std::vector<MatchedPair> phash_near_pairs(const std::vector<uint64_t>& hashes, const std::vector<uint8_t>& valid,
                                          const PhashIndexOptions& options, IndexStats* stats_out) {
  const int k = options.max_distance;
  VLM_CHECK(k >= 0 && k <= 32, "pHash index: max_distance ", k, " not in [0, 32]");
  VLM_CHECK(valid.empty() || valid.size() == hashes.size(), "pHash index: ", valid.size(), " flags for ",
            hashes.size(), " hashes");
  VLM_CHECK(options.bucket_cap >= 1, "pHash index: bucket_cap must be >= 1");
  IndexStats stats;
  std::vector<MatchedPair> pairs;

  // Identical hashes: matched to their first occurrence, outside the index.
  std::unordered_map<uint64_t, uint32_t> first_of;
  std::vector<uint32_t> distinct;
  for (size_t i = 0; i < hashes.size(); ++i) {
    if (!valid.empty() && !valid[i]) continue;
    auto [it, inserted] = first_of.emplace(hashes[i], static_cast<uint32_t>(i));
    if (inserted) {
      distinct.push_back(static_cast<uint32_t>(i));
    } else {
      pairs.push_back({static_cast<uint32_t>(i), it->second, 0.0});
      ++stats.identical_matches;
    }
  }
  stats.distinct_values = distinct.size();

  const int m = options.blocks > 0 ? options.blocks : phash_auto_blocks(k, distinct.size());
  VLM_CHECK(m >= 1 && m <= k + 1, "pHash index: ", m, " blocks for distance ", k, " (need 1..", k + 1, ")");
  const int radius = k / m;
  stats.blocks = m;
  stats.radius = radius;
  std::vector<int> width(m), offset(m);
  for (int j = 0, off = 0; j < m; ++j) {
    width[j] = 64 / m + (j < 64 % m ? 1 : 0);
    offset[j] = off;
    off += width[j];
  }
  auto block_value = [&](uint64_t h, int j) {
    const uint64_t mask = width[j] == 64 ? ~uint64_t{0} : (uint64_t{1} << width[j]) - 1;
    return (h >> offset[j]) & mask;
  };

  std::vector<BucketTable> tables(m);
  std::vector<uint32_t> stamp(distinct.size(), std::numeric_limits<uint32_t>::max());
  for (uint32_t d = 0; d < distinct.size(); ++d) {
    const uint64_t h = hashes[distinct[d]];
    for (int j = 0; j < m; ++j) {
      for_each_within(block_value(h, j), width[j], radius, 0, [&](uint64_t probe) {
        const std::vector<uint32_t>* bucket = tables[j].find(probe);
        if (!bucket) return;
        for (uint32_t c : *bucket) {
          if (stamp[c] == d) continue;
          stamp[c] = d;
          ++stats.candidates_checked;
          const int dist = hamming_distance(h, hashes[distinct[c]]);
          if (dist <= k) {
            pairs.push_back({distinct[d], distinct[c], static_cast<double>(dist)});
            ++stats.pairs_matched;
          }
        }
      });
    }
    for (int j = 0; j < m; ++j) tables[j].insert(block_value(h, j), d, options.bucket_cap, stats);
  }
  if (stats_out) *stats_out = stats;
  return pairs;
}

std::vector<MatchedPair> minhash_near_pairs(const std::vector<uint32_t>& signatures, int num_perm,
                                            const std::vector<uint8_t>& valid, const MinHashIndexOptions& options,
                                            IndexStats* stats_out) {
  VLM_CHECK(num_perm > 0 && signatures.size() % static_cast<size_t>(num_perm) == 0, "MinHash index: ",
            signatures.size(), " slots for num_perm ", num_perm);
  const size_t n = signatures.size() / static_cast<size_t>(num_perm);
  VLM_CHECK(valid.empty() || valid.size() == n, "MinHash index: ", valid.size(), " flags for ", n, " signatures");
  VLM_CHECK(options.threshold > 0 && options.threshold <= 1, "MinHash index: threshold ", options.threshold);
  VLM_CHECK(options.bucket_cap >= 1, "MinHash index: bucket_cap must be >= 1");
  LshParams lsh{options.bands, options.rows};
  if (lsh.bands <= 0 || lsh.rows <= 0) lsh = lsh_params_for_threshold(options.threshold, num_perm);
  VLM_CHECK(lsh.bands * lsh.rows <= num_perm, "MinHash index: ", lsh.bands, " bands x ", lsh.rows, " rows > ",
            num_perm, " slots");
  IndexStats stats;
  stats.bands = lsh.bands;
  stats.rows = lsh.rows;
  std::vector<MatchedPair> pairs;
  auto row = [&](size_t i) { return signatures.data() + i * static_cast<size_t>(num_perm); };
  const size_t row_bytes = sizeof(uint32_t) * static_cast<size_t>(num_perm);

  // Identical signatures: matched to their first occurrence (hash of the whole row, then compared).
  std::unordered_map<uint64_t, std::vector<uint32_t>> firsts_by_hash;
  std::vector<uint32_t> distinct;
  for (size_t i = 0; i < n; ++i) {
    if (!valid.empty() && !valid[i]) continue;
    std::vector<uint32_t>& firsts = firsts_by_hash[murmur3_x64_128(row(i), row_bytes, 0).lo];
    bool matched = false;
    for (uint32_t f : firsts)
      if (std::memcmp(row(f), row(i), row_bytes) == 0) {
        pairs.push_back({static_cast<uint32_t>(i), f, 1.0});
        ++stats.identical_matches;
        matched = true;
        break;
      }
    if (!matched) {
      firsts.push_back(static_cast<uint32_t>(i));
      distinct.push_back(static_cast<uint32_t>(i));
    }
  }
  stats.distinct_values = distinct.size();

  const size_t band_bytes = sizeof(uint32_t) * static_cast<size_t>(lsh.rows);
  auto band_key = [&](size_t i, int band) {
    return murmur3_x64_128(row(i) + static_cast<size_t>(band) * lsh.rows, band_bytes, static_cast<uint32_t>(band)).lo;
  };
  std::vector<BucketTable> tables(static_cast<size_t>(lsh.bands));
  std::vector<uint32_t> stamp(distinct.size(), std::numeric_limits<uint32_t>::max());
  std::vector<uint64_t> keys(static_cast<size_t>(lsh.bands));
  for (uint32_t d = 0; d < distinct.size(); ++d) {
    const size_t i = distinct[d];
    for (int band = 0; band < lsh.bands; ++band) {
      keys[band] = band_key(i, band);
      const std::vector<uint32_t>* bucket = tables[band].find(keys[band]);
      if (!bucket) continue;
      for (uint32_t c : *bucket) {
        if (stamp[c] == d) continue;
        stamp[c] = d;
        ++stats.candidates_checked;
        const double j = minhash_jaccard(row(i), row(distinct[c]), num_perm);
        if (j >= options.threshold - 1e-12) {
          pairs.push_back({static_cast<uint32_t>(i), distinct[c], j});
          ++stats.pairs_matched;
        }
      }
    }
    for (int band = 0; band < lsh.bands; ++band) tables[band].insert(keys[band], d, options.bucket_cap, stats);
  }
  if (stats_out) *stats_out = stats;
  return pairs;
}

std::vector<MatchedPair> phash_all_pairs(const std::vector<uint64_t>& hashes, const std::vector<uint8_t>& valid,
                                         int max_distance) {
  std::vector<MatchedPair> pairs;
  for (size_t i = 0; i < hashes.size(); ++i) {
    if (!valid.empty() && !valid[i]) continue;
    for (size_t j = 0; j < i; ++j) {
      if (!valid.empty() && !valid[j]) continue;
      const int d = hamming_distance(hashes[i], hashes[j]);
      if (d <= max_distance) pairs.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(j), static_cast<double>(d)});
    }
  }
  return pairs;
}

}  // namespace vlm
