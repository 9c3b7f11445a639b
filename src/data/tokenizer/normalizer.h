// Normalizers of tokenizer.json: the text transformations applied to each stretch of input between added tokens
// before pre-tokenization (NFC; SentencePiece-style Prepend("▁") + Replace(" ", "▁") as in Mistral's and Llama-2's
// files; Strip). A Sequence is a list of steps applied in order.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer/regex.h"

namespace vlm::tok {

enum class NormalizerKind : uint8_t { nfc, prepend, replace, strip };

struct NormalizerStep {
  NormalizerKind kind = NormalizerKind::nfc;
  std::string text;                    // prepend: the prefix; replace: the literal pattern (when regex is null)
  std::shared_ptr<const Regex> regex;  // replace: the regex pattern
  std::string content;                 // replace: the replacement
  bool strip_left = false, strip_right = false;  // strip: Unicode whitespace on either side
};

// Applies `steps` in order. Prepend adds nothing to an empty string, as Hugging Face's does.
std::string normalize(const std::vector<NormalizerStep>& steps, std::string_view text);

}  // namespace vlm::tok
