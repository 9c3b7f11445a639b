// Caption normalisation, shingling, MinHash signatures and LSH parameter choice (see minhash.h).
#include "data/dedup/minhash.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/philox.h"
#include "core/status.h"
#include "data/io/content_hash.h"

namespace vlm {
namespace {

constexpr uint64_t kMersenne61 = (uint64_t{1} << 61) - 1;

// (a * x + b) mod 2^61 - 1 for a, x, b < p.
inline uint64_t mulmod_add_p61(uint64_t a, uint64_t x, uint64_t b) {
  const unsigned __int128 prod = static_cast<unsigned __int128>(a) * x + b;
  uint64_t r = static_cast<uint64_t>(prod & kMersenne61) + static_cast<uint64_t>(prod >> 61);
  r = (r & kMersenne61) + (r >> 61);
  return r >= kMersenne61 ? r - kMersenne61 : r;
}

bool is_ascii_space_or_punct(unsigned char c) {
  if (c == ' ' || (c >= '\t' && c <= '\r')) return true;
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~');
}

}  // namespace

std::string normalize_caption_for_dedup(std::string_view caption) {
  std::string out;
  out.reserve(caption.size());
  bool pending_space = false;
  for (unsigned char c : caption) {
    if (is_ascii_space_or_punct(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c));
  }
  return out;
}

std::vector<uint64_t> caption_shingle_hashes(std::string_view normalized) {
  std::vector<uint64_t> out;
  if (normalized.empty()) return out;
  auto base = [](std::string_view s) { return murmur3_x64_128(s.data(), s.size(), 0).lo % kMersenne61; };
  if (normalized.size() < static_cast<size_t>(kCaptionShingleChars)) {
    out.push_back(base(normalized));
    return out;
  }
  out.reserve(normalized.size() - kCaptionShingleChars + 1);
  for (size_t i = 0; i + kCaptionShingleChars <= normalized.size(); ++i)
    out.push_back(base(normalized.substr(i, kCaptionShingleChars)));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

MinHasher::MinHasher(int num_perm, uint64_t seed) : seed_(seed) {
  VLM_CHECK(num_perm > 0 && num_perm <= 4096, "MinHasher: num_perm ", num_perm, " not in [1, 4096]");
  Philox rng(seed, 0);
  a_.resize(static_cast<size_t>(num_perm));
  b_.resize(static_cast<size_t>(num_perm));
  for (int i = 0; i < num_perm; ++i) {
    a_[i] = 1 + rng.uniform_int(kMersenne61 - 1);
    b_[i] = rng.uniform_int(kMersenne61);
  }
}

bool MinHasher::signature(std::string_view caption, uint32_t* out) const {
  return signature_of_shingles(caption_shingle_hashes(normalize_caption_for_dedup(caption)), out);
}

bool MinHasher::signature_of_shingles(const std::vector<uint64_t>& shingles, uint32_t* out) const {
  if (shingles.empty()) return false;
  const size_t n = a_.size();
  std::vector<uint64_t> mins(n, std::numeric_limits<uint64_t>::max());
  for (uint64_t x : shingles)
    for (size_t i = 0; i < n; ++i) mins[i] = std::min(mins[i], mulmod_add_p61(a_[i], x, b_[i]));
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint32_t>(mins[i]);
  return true;
}

double minhash_jaccard(const uint32_t* a, const uint32_t* b, int num_perm) {
  int equal = 0;
  for (int i = 0; i < num_perm; ++i) equal += a[i] == b[i];
  return static_cast<double>(equal) / num_perm;
}

double shingle_jaccard(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  if (a.empty() && b.empty()) return 1.0;
  size_t i = 0, j = 0, common = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] == b[j]) {
      ++common, ++i, ++j;
    } else if (a[i] < b[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  return static_cast<double>(common) / static_cast<double>(a.size() + b.size() - common);
}

double lsh_candidate_probability(double jaccard, const LshParams& params) {
  return 1.0 - std::pow(1.0 - std::pow(jaccard, params.rows), params.bands);
}

LshParams lsh_params_for_threshold(double threshold, int num_perm, double recall_at_threshold) {
  VLM_CHECK(threshold > 0 && threshold <= 1 && num_perm > 0, "lsh params: threshold ", threshold, ", num_perm ",
            num_perm);
  VLM_CHECK(recall_at_threshold > 0 && recall_at_threshold < 1, "lsh params: recall ", recall_at_threshold);
  // More rows per band make random pairs rarer candidates; as many bands as fit keep the recall up. Take the most
  // rows that still reach the recall at the threshold (one row per band always does, unless num_perm is tiny).
  LshParams best{num_perm, 1};
  for (int r = 1; r <= num_perm; ++r) {
    const LshParams p{num_perm / r, r};
    if (lsh_candidate_probability(threshold, p) >= recall_at_threshold) best = p;
  }
  return best;
}

}  // namespace vlm
