// MinHash signatures of captions, for near-duplicate caption detection with LSH (see near_index.h).
//
// Normalisation: ASCII letters are lower-cased; every run of ASCII whitespace and ASCII punctuation becomes one
// space; both ends are trimmed; other bytes (digits, UTF-8 sequences) are kept. So "A Dog, running!" and
// "a dog running" normalise to the same text.
// Shingles: character 5-grams of the normalised text, as byte windows (a UTF-8 character may be split: the
// shingles are only hashed, never shown); a text of 1-4 bytes is one shingle; an empty text has none (and no
// signature). Character shingles, rather than word n-grams, keep short captions (5-10 words, the usual alt-text)
// with a changed word or a typo close: one changed 6-letter word in a 100-character caption leaves J ~ 0.8.
// Each shingle's base hash x is MurmurHash3_x64_128's low word (seed 0) reduced mod p = 2^61 - 1; hash function i
// is h_i(x) = (a_i x + b_i) mod p with a_i in [1, p), b_i in [0, p) drawn from Philox(seed, 0); signature slot i is
// the low 32 bits of min over shingles of h_i. The estimated Jaccard of two signatures is the fraction of equal
// slots (standard error sqrt(J (1 - J) / num_perm)).
// Thread-safe after construction (MinHasher is immutable).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vlm {

constexpr int kCaptionShingleChars = 5;

std::string normalize_caption_for_dedup(std::string_view caption);
// Distinct base hashes of the normalised text's shingles, sorted (empty for an empty text).
std::vector<uint64_t> caption_shingle_hashes(std::string_view normalized);

class MinHasher {
 public:
  explicit MinHasher(int num_perm = 128, uint64_t seed = 0x5eed);
  int num_perm() const { return static_cast<int>(a_.size()); }
  uint64_t seed() const { return seed_; }

  // Writes num_perm() slots to `out`. Returns false (and leaves `out` untouched) when the caption has no shingles.
  bool signature(std::string_view caption, uint32_t* out) const;
  // The same from base hashes (caption_shingle_hashes of normalised text); false when `shingles` is empty.
  bool signature_of_shingles(const std::vector<uint64_t>& shingles, uint32_t* out) const;

 private:
  uint64_t seed_;
  std::vector<uint64_t> a_, b_;
};

// Fraction of equal slots.
double minhash_jaccard(const uint32_t* a, const uint32_t* b, int num_perm);
// Exact Jaccard of two shingle sets (sorted distinct hashes), the reference the estimate approximates.
double shingle_jaccard(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b);

// LSH banding: `bands` bands of `rows` slots each (bands * rows <= num_perm). A pair with Jaccard s becomes a
// candidate with probability 1 - (1 - s^rows)^bands.
struct LshParams {
  int bands = 0, rows = 0;
};
// The (bands, rows) with the most rows per band (fewest random candidates) whose candidate probability at
// `threshold` is still >= recall_at_threshold, using num_perm / rows bands. Every candidate is verified by its
// estimated Jaccard afterwards, so a generous S-curve costs only verification time, while a missed candidate is a
// missed duplicate: hence a high recall target rather than a curve centred on the threshold.
LshParams lsh_params_for_threshold(double threshold, int num_perm, double recall_at_threshold = 0.95);
double lsh_candidate_probability(double jaccard, const LshParams& params);

}  // namespace vlm
