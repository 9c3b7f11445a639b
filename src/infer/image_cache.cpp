// ImageEmbeddingCache: an LRU map under a byte budget.
#include "infer/image_cache.h"

namespace vlm::infer {

std::optional<Tensor> ImageEmbeddingCache::get(const ImageContentHash& key) {
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++misses_;
    return std::nullopt;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void ImageEmbeddingCache::put(const ImageContentHash& key, const Tensor& embeddings) {
  const int64_t size = static_cast<int64_t>(embeddings.nbytes());
  if (index_.count(key) || size > budget_) return;
  while (bytes_ + size > budget_ && !lru_.empty()) {
    bytes_ -= static_cast<int64_t>(lru_.back().second.nbytes());
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(key, embeddings);
  index_.emplace(key, lru_.begin());
  bytes_ += size;
}

}  // namespace vlm::infer
