// ExactDedupSet: a thread-safe "seen before?" set of 128-bit content hashes, for online exact dedup in the loader
// (hash the encoded image bytes with content_hash(), then insert(): false means an earlier sample had the same
// bytes). The set is split into 64 stripes, each a hash set behind its own mutex, picked by the hash's high bits,
// so decode threads rarely wait on each other. Memory: about 40 bytes per distinct hash.
// Thread-safe: every member may be called from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_set>

#include "data/io/content_hash.h"

namespace vlm {

class ExactDedupSet {
 public:
  ExactDedupSet() = default;
  ExactDedupSet(const ExactDedupSet&) = delete;
  ExactDedupSet& operator=(const ExactDedupSet&) = delete;

  // Records `hash`; true when it was not seen before (the sample is new), false for a duplicate.
  bool insert(const ImageContentHash& hash);
  bool contains(const ImageContentHash& hash) const;
  size_t size() const;  // distinct hashes recorded
  void clear();

 private:
  static constexpr size_t kStripes = 64;
  struct Stripe {
    mutable std::mutex mu;
    std::unordered_set<ImageContentHash, ImageContentHashHasher> seen;
  };
  Stripe& stripe(const ImageContentHash& hash) const { return stripes_[hash.hi % kStripes]; }
  mutable std::array<Stripe, kStripes> stripes_;
};

}  // namespace vlm
