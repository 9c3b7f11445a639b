// The KV block pool: the bookkeeping of a paged KV cache's fixed-size blocks (the memory itself is KvCache's).
// Every block has a reference count: sequences that share a prefix (forks, prefix-cache hits) hold the same block.
// A block whose count falls to zero joins the free queue; if it was full and registered under a prefix hash it
// stays findable there (a "cached" block) until allocation reuses it, least recently freed first (LRU eviction).
// Not thread-safe: the engine's step loop owns it.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "data/io/content_hash.h"

namespace vlm::infer {

// A full block's prefix key: the hash chain over its tokens and every token before it (prefix_hash.h).
using BlockHash = ImageContentHash;

struct BlockPoolStats {
  int64_t total = 0;      // blocks in the pool
  int64_t used = 0;       // held by at least one sequence
  int64_t free = 0;       // held by none (cached ones included): what allocation can take
  int64_t cached = 0;     // free but still findable by their prefix hash
  int64_t hits = 0;       // prefix-cache lookups that found a block
  int64_t misses = 0;     // lookups that did not
  int64_t evictions = 0;  // cached blocks reused for other content
};

class BlockPool {
 public:
  explicit BlockPool(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(refs_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  // A block with count 1, or nullopt when every block is held. Takes the least recently freed block; a cached one
  // loses its hash (evicted).
  std::optional<int32_t> allocate();
  void retain(int32_t block);  // count + 1 (a fork, or a prefix-cache hit on a held block)
  // count - 1; at zero the block joins the back of the free queue (evicted last).
  void release(int32_t block);
  int32_t ref_count(int32_t block) const { return refs_[static_cast<size_t>(block)]; }

  // The block holding `hash`, retained for the caller (taken off the free queue if it was unreferenced); nullopt
  // on a miss. Counts hits and misses.
  std::optional<int32_t> lookup(const BlockHash& hash);
  // Records that held, full `block` holds the prefix `hash`. A hash already registered (two sequences computed the
  // same prefix at once) keeps its first block; a block is registered once.
  void register_hash(int32_t block, const BlockHash& hash);
  bool is_cached(int32_t block) const { return hash_of_[static_cast<size_t>(block)].has_value(); }
  // Forgets every cached prefix (unreferenced blocks stay free).
  void clear_cache();

  BlockPoolStats stats() const;
  // Checks the invariants (every block either held or on the free queue exactly once, the hash maps consistent);
  // aborts with the first violation. For tests and debug builds.
  void check_invariants() const;

 private:
  void forget_hash(int32_t block);

  std::vector<int32_t> refs_;
  std::list<int32_t> free_;                             // front: evicted first
  int64_t cached_ = 0;                                  // free blocks with a hash (stats() in O(1))
  std::vector<std::list<int32_t>::iterator> free_pos_;  // valid while refs_ == 0
  std::vector<std::optional<BlockHash>> hash_of_;
  std::unordered_map<BlockHash, int32_t, ImageContentHashHasher> by_hash_;
  int64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace vlm::infer
