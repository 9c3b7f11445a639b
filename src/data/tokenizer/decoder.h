// Decoders of tokenizer.json: how the token strings of ids become text. Each step maps the list of token strings
// to a new list (as Hugging Face's decode_chain does) and the result is concatenated: ByteLevel (GPT-2 alphabet
// back to bytes), and the SentencePiece-style chain Replace("▁", " "), ByteFallback (<0xAB> tokens to bytes),
// Fuse, Strip, plus Metaspace.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer/regex.h"

namespace vlm::tok {

enum class DecoderKind : uint8_t { byte_level, metaspace, replace, byte_fallback, fuse, strip };

struct DecoderStep {
  DecoderKind kind = DecoderKind::byte_level;
  std::string text;                    // replace: literal pattern; metaspace: the replacement character (UTF-8)
  std::shared_ptr<const Regex> regex;  // replace: regex pattern
  std::string content;                 // replace: replacement; strip: the character stripped
  int start = 0, stop = 0;             // strip: at most this many from the start / the end of each token
  bool prepend = true;                 // metaspace: the encoder prepended a replacement (not prepend_scheme never)
};

// Applies `steps` to `tokens` and concatenates the result. Byte sequences are returned as they are: bytes that do
// not form valid UTF-8 are not replaced by U+FFFD (Hugging Face replaces them).
std::string decode_tokens(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens);

}  // namespace vlm::tok
