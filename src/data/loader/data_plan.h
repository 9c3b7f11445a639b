// Which samples each rank reads in each epoch, so that every rank gets the same number of samples (and batches) for
// any shard count, nothing is read twice in an epoch, and the assignment depends only on (shards, counts, seed,
// rank, world) — never on timing or thread counts.
//
// Epoch e lays all shards out in one global order (shuffled by Philox(seed, e), or as given) and numbers their
// samples 0..total-1 in that order. Rank r owns the contiguous range [r*q, (r+1)*q) with q = floor(total / world):
// it opens only the shards overlapping its range and skips to the first sample it owns. The at most world-1 samples
// past world*q are left out of that epoch (different ones each epoch when shuffled).
// Sample counts come from img2dataset's "<shard>_stats.json" ("successes") beside a local shard, else from reading
// the tar headers once (bodies are skipped: seeks on local files).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace vlm {

struct ShardSegment {
  size_t shard = 0;        // index into the shard list
  uint64_t first = 0;      // first sample (within the shard) this rank reads
  uint64_t count = 0;      // samples read from there
};

// Counts the samples of each shard (see the header comment). A shard that cannot be opened counts 0; a broken one
// counts the samples before the break; each such shard is warned about (naming it and the reason) and its message
// appended to `problems` when given. `progress(i, n)` is called after each shard.
Expected<std::vector<uint64_t>> count_shard_samples(const std::vector<std::string>& shards,
                                                    std::vector<std::string>* problems = nullptr,
                                                    const std::function<void(size_t, size_t)>& progress = {});

class DataPlan {
 public:
  // invalid_argument when world < 1, rank outside [0, world), or counts do not match shards.
  static Expected<DataPlan> create(std::vector<std::string> shards, std::vector<uint64_t> counts, uint64_t seed,
                                   bool shuffle_shards, int rank, int world);

  const std::vector<std::string>& shards() const { return shards_; }
  uint64_t total_samples() const { return total_; }
  // Samples this rank (and every other rank) reads per epoch.
  uint64_t samples_per_rank() const { return total_ / static_cast<uint64_t>(world_); }
  int rank() const { return rank_; }
  int world() const { return world_; }
  uint64_t seed() const { return seed_; }
  std::vector<size_t> shard_order(uint64_t epoch) const;
  // This rank's samples of `epoch`, in reading order.
  std::vector<ShardSegment> segments(uint64_t epoch) const;

 private:
  DataPlan() = default;
  std::vector<std::string> shards_;
  std::vector<uint64_t> counts_;
  uint64_t total_ = 0, seed_ = 0;
  bool shuffle_ = true;
  int rank_ = 0, world_ = 1;
};

}  // namespace vlm
