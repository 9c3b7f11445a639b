// Training a byte-level BPE tokenizer from text, the classic way (Sennrich et al.; Hugging Face's BpeTrainer):
// pre-tokenize with the GPT-2 ByteLevel pattern, count words, then repeatedly merge the most frequent adjacent
// pair. The result is an ordinary Tokenizer (save() writes a tokenizer.json Hugging Face can load).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/tokenizer/tokenizer.h"

namespace vlm {

struct BpeTrainOptions {
  // Total ids: special tokens + the 256 byte symbols + one per learned merge. Training stops early when no pair
  // reaches min_frequency.
  int32_t vocab_size = 2048;
  // A pair occurring fewer times than this (summed over the corpus) is never merged.
  int64_t min_frequency = 2;
  // Special tokens, given ids 0..k-1 in this order (as SmolLM2 does), e.g. "<|endoftext|>", "<|im_start|>",
  // "<|im_end|>", "<image>", "<pad>". Occurrences in the corpus are cut out before counting words.
  std::vector<std::string> special_tokens;
  // Split every digit into its own piece before ByteLevel (SmolLM2's Digits(individual_digits=true)).
  bool individual_digits = false;
};

// Deterministic: the same corpus and options give the same tokenizer. Ties between equally frequent pairs go to
// the pair with the smaller (left id, right id). Errors: invalid_argument naming the bad option.
Expected<Tokenizer> train_bpe(const std::vector<std::string>& corpus, const BpeTrainOptions& options);

}  // namespace vlm
