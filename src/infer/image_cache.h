// Image-embedding cache: the projector's output for an image (its image_tokens() rows of text-width embeddings),
// keyed by the image's content key (image_key(): bytes + preprocessing), kept across requests within a byte budget,
// least recently used evicted first. An entry in use by a request stays alive through the tensor the request holds,
// so eviction only stops later requests from finding it. Not thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <utility>

#include "core/tensor.h"
#include "data/io/content_hash.h"

namespace vlm::infer {

class ImageEmbeddingCache {
 public:
  explicit ImageEmbeddingCache(int64_t budget_bytes) : budget_(budget_bytes) {}
  // The embeddings stored under `key` (counted as a hit, made most recent), or nullopt (a miss).
  std::optional<Tensor> get(const ImageContentHash& key);
  // Stores `embeddings` (an entry larger than the whole budget is not kept); evicts least recent entries to fit.
  void put(const ImageContentHash& key, const Tensor& embeddings);
  int64_t bytes() const { return bytes_; }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  size_t size() const { return index_.size(); }

 private:
  using Entry = std::pair<ImageContentHash, Tensor>;
  int64_t budget_;
  int64_t bytes_ = 0, hits_ = 0, misses_ = 0;
  std::list<Entry> lru_;  // front: most recent
  std::unordered_map<ImageContentHash, std::list<Entry>::iterator, ImageContentHashHasher> index_;
};

}  // namespace vlm::infer
