// Striped, mutex-guarded set of content hashes (see exact_dedup_set.h).
#include "data/dedup/exact_dedup_set.h"

namespace vlm {

bool ExactDedupSet::insert(const ImageContentHash& hash) {
  Stripe& s = stripe(hash);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.seen.insert(hash).second;
}

bool ExactDedupSet::contains(const ImageContentHash& hash) const {
  Stripe& s = stripe(hash);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.seen.count(hash) != 0;
}

size_t ExactDedupSet::size() const {
  size_t n = 0;
  for (Stripe& s : stripes_) {
    std::lock_guard<std::mutex> lock(s.mu);
    n += s.seen.size();
  }
  return n;
}

void ExactDedupSet::clear() {
  for (Stripe& s : stripes_) {
    std::lock_guard<std::mutex> lock(s.mu);
    s.seen.clear();
  }
}

}  // namespace vlm
