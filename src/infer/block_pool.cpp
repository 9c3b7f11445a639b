// BlockPool: reference counts, the LRU free queue and the prefix-hash index.
#include "infer/block_pool.h"

#include "core/status.h"

namespace vlm::infer {

BlockPool::BlockPool(int64_t num_blocks)
    : refs_(static_cast<size_t>(num_blocks), 0),
      free_pos_(static_cast<size_t>(num_blocks)),
      hash_of_(static_cast<size_t>(num_blocks)) {
  VLM_CHECK(num_blocks > 0 && num_blocks < (int64_t{1} << 31), "BlockPool: ", num_blocks, " blocks");
  for (int32_t b = 0; b < static_cast<int32_t>(num_blocks); ++b)
    free_pos_[static_cast<size_t>(b)] = free_.insert(free_.end(), b);
}

std::optional<int32_t> BlockPool::allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t b = free_.front();
  free_.pop_front();
  if (hash_of_[static_cast<size_t>(b)]) {
    forget_hash(b);
    --cached_;
    ++evictions_;
  }
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

void BlockPool::retain(int32_t b) {
  VLM_CHECK(b >= 0 && b < num_blocks(), "BlockPool::retain: no block ", b);
  if (refs_[static_cast<size_t>(b)]++ == 0) {
    free_.erase(free_pos_[static_cast<size_t>(b)]);
    if (hash_of_[static_cast<size_t>(b)]) --cached_;
  }
}

void BlockPool::release(int32_t b) {
  VLM_CHECK(b >= 0 && b < num_blocks() && refs_[static_cast<size_t>(b)] > 0, "BlockPool::release: block ", b,
            " is not held");
  if (--refs_[static_cast<size_t>(b)] == 0) {
    free_pos_[static_cast<size_t>(b)] = free_.insert(free_.end(), b);
    if (hash_of_[static_cast<size_t>(b)]) ++cached_;
  }
}

std::optional<int32_t> BlockPool::lookup(const BlockHash& hash) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) {
    ++misses_;
    return std::nullopt;
  }
  ++hits_;
  retain(it->second);
  return it->second;
}

void BlockPool::register_hash(int32_t b, const BlockHash& hash) {
  VLM_CHECK(b >= 0 && b < num_blocks() && refs_[static_cast<size_t>(b)] > 0, "BlockPool::register_hash: block ", b,
            " is not held");
  if (hash_of_[static_cast<size_t>(b)] || by_hash_.count(hash)) return;
  hash_of_[static_cast<size_t>(b)] = hash;
  by_hash_.emplace(hash, b);
}

void BlockPool::forget_hash(int32_t b) {
  by_hash_.erase(*hash_of_[static_cast<size_t>(b)]);
  hash_of_[static_cast<size_t>(b)].reset();
}

void BlockPool::clear_cache() {
  for (int32_t b = 0; b < static_cast<int32_t>(num_blocks()); ++b)
    if (hash_of_[static_cast<size_t>(b)]) {
      if (refs_[static_cast<size_t>(b)] == 0) --cached_;
      forget_hash(b);
    }
}

BlockPoolStats BlockPool::stats() const {
  BlockPoolStats s;
  s.total = num_blocks();
  s.free = num_free();
  s.used = s.total - s.free;
  s.cached = cached_;
  s.hits = hits_;
  s.misses = misses_;
  s.evictions = evictions_;
  return s;
}

void BlockPool::check_invariants() const {
  std::vector<int> on_free(refs_.size(), 0);
  int64_t cached = 0;
  for (int32_t b : free_) {
    VLM_CHECK(b >= 0 && b < num_blocks(), "free queue holds block ", b);
    ++on_free[static_cast<size_t>(b)];
    cached += hash_of_[static_cast<size_t>(b)].has_value();
  }
  VLM_CHECK(cached == cached_, "the pool counts ", cached_, " cached blocks; the free queue holds ", cached);
  for (size_t b = 0; b < refs_.size(); ++b) {
    VLM_CHECK(refs_[b] >= 0, "block ", b, " has count ", refs_[b]);
    VLM_CHECK(on_free[b] == (refs_[b] == 0 ? 1 : 0), "block ", b, " with count ", refs_[b], " is on the free queue ",
              on_free[b], " times");
    if (hash_of_[b]) {
      auto it = by_hash_.find(*hash_of_[b]);
      VLM_CHECK(it != by_hash_.end() && it->second == static_cast<int32_t>(b), "block ", b,
                "'s hash does not map back to it");
    }
  }
  for (const auto& [hash, b] : by_hash_)
    VLM_CHECK(hash_of_[static_cast<size_t>(b)] && *hash_of_[static_cast<size_t>(b)] == hash, "hash index names block ",
              b, " which does not hold that hash");
}

}  // namespace vlm::infer
