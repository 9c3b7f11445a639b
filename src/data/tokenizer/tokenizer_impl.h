// Internal state of a Tokenizer, shared by the JSON reader/writer, the encoder and the trainer. Not part of the
// public API: include tokenizer.h instead.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "data/tokenizer/added_tokens.h"
#include "data/tokenizer/bpe.h"
#include "data/tokenizer/decoder.h"
#include "data/tokenizer/normalizer.h"
#include "data/tokenizer/pre_tokenizer.h"
#include "data/tokenizer/tokenizer.h"

namespace vlm {

struct Tokenizer::Impl {
  // --- configuration (what tokenizer.json says) ---
  std::vector<tok::NormalizerStep> normalizers;
  std::string normalizer_json = "null";  // kept verbatim for saving
  std::vector<tok::PreTokenizerStep> pre_tokenizer;
  bool pre_tokenizer_is_sequence = false;  // written back as a Sequence even with one step
  // No decoder at all: tokens are joined with spaces, as Hugging Face does.
  bool has_decoder = true;
  std::vector<tok::DecoderStep> decoders{tok::DecoderStep{}};  // ByteLevel
  std::string decoder_json = R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true})";
  std::string post_processor_json = "null";  // kept verbatim
  std::vector<int32_t> post_prefix, post_suffix;  // ids encode(text, true) adds around a single sequence
  tok::BpeModel model;
  std::vector<tok::AddedToken> added_tokens;  // in file order

  // --- derived by finalize_tokenizer ---
  int32_t vocab_size = 0;
  std::vector<int32_t> added_index_of_id;  // id -> index into added_tokens, or -1
  std::unordered_map<std::string, int32_t> added_id_of_content;
  std::vector<tok::AddedToken> normalized_added;  // normalized=true tokens with their content normalized
  tok::AddedTokenMatcher raw_matcher;             // normalized=false tokens, matched on the raw text
  tok::AddedTokenMatcher normalized_matcher;      // normalized=true tokens, matched after normalization
  mutable tok::WordCache cache;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
};

// Validates the added tokens and post-processor ids against the model and builds the derived tables. Errors are
// parse_error naming `source` and the field. Call once, after the configuration is complete; the Impl must not
// move afterwards (the matchers point into it).
Status finalize_tokenizer(Tokenizer::Impl& impl, const std::string& source);

// tokenizer.json <-> Impl (tokenizer_json.cpp, tokenizer_json_write.cpp).
Expected<std::shared_ptr<Tokenizer::Impl>> parse_tokenizer_json(std::string_view text, const std::string& source);
std::string tokenizer_json_text(const Tokenizer::Impl& impl);

struct TokenizerAccess {
  static Tokenizer make(std::shared_ptr<const Tokenizer::Impl> impl) { return Tokenizer(std::move(impl)); }
};

}  // namespace vlm
