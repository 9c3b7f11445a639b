// Tokenizer: BPE that reads and writes Hugging Face `tokenizer.json` files and encodes exactly as the `tokenizers`
// library does: byte-level vocabularies (GPT-2, SmolLM2/SmolVLM, Llama-3, Qwen2/3) and SentencePiece-style ones with
// byte fallback (Mistral, Llama-2). Added/special tokens are found in the raw text first, then normalizers (NFC,
// Prepend, Replace, Strip) -> pre-tokenizers (ByteLevel, Digits, Split with hand-written or PCRE2 patterns,
// Metaspace) -> BPE merges by rank; decoding runs the file's decoder chain. Any byte string can be encoded (invalid
// UTF-8 included), and decode(encode(s)) == s whenever the vocabulary holds the 256 byte symbols, as every real
// byte-level vocabulary does.
//
// Thread safety: a Tokenizer is immutable once built; encode/decode may be called from many threads at once
// (the word cache is internally locked). Copies are cheap and share the same tables.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vlm {

class Tokenizer {
 public:
  // An empty tokenizer: only loaded() may be called on it. Use load(), from_json_text() or train_bpe().
  Tokenizer() = default;

  // Reads a tokenizer.json (`path` may also be a model directory holding one). Errors name the file and the JSON
  // field: parse_error for malformed files (a regex that does not compile included), unsupported for valid files
  // using features this implementation lacks (e.g. a WordPiece model, a Lowercase normalizer, a Whitespace
  // pre-tokenizer), naming the type.
  static Expected<Tokenizer> load(const std::string& path);
  static Expected<Tokenizer> from_json_text(std::string_view json_text, const std::string& source_name);
  // Writes a tokenizer.json that Hugging Face `tokenizers` can load (and load() reads back identically).
  Status save(const std::string& path) const;
  std::string to_json_text() const;

  // Token ids of `text`. With add_special_tokens, the post-processor's template tokens are added around them
  // (e.g. Llama-3's <|begin_of_text|>); note Hugging Face's Python `encode` adds them by default.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Appends the ids of `text` to `out` (no post-processor tokens).
  void encode_append(std::string_view text, std::vector<int32_t>& out) const;
  // The bytes the ids stand for, concatenated. Unknown ids are skipped. The result is returned byte for byte:
  // a cut in the middle of a multi-byte character is not replaced by U+FFFD (Hugging Face does that).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;
  // decode({id}); empty for an unknown id. With SentencePiece decoders the word-initial space of the token is
  // stripped as at the start of a text: stream such output by decoding the whole sequence and taking the new suffix.
  std::string token_bytes(int32_t id) const;

  // Number of ids the embedding table needs: max id + 1 over the model vocabulary and the added tokens.
  int32_t vocab_size() const;
  // Added tokens are looked up first, then the model vocabulary (byte-level spelling, e.g. "Ġthe").
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Empty string for an unknown id.
  std::string id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  std::vector<int32_t> special_ids() const;  // ascending

  // Conventional ids, found by token name among the special tokens (none when absent):
  // bos: the post-processor's leading token, else <|begin_of_text|>, <s>, <|endoftext|> (GPT-2 and SmolLM2 use
  // <|endoftext|> as bos and eos); eos: <|end_of_text|>, </s>, <|endoftext|>; pad: <pad>, <|pad|>,
  // <|finetune_right_pad_id|>. Chat models end turns with another token (<|im_end|>, <|eot_id|>): look it up.
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> pad_id() const;

  bool loaded() const { return impl_ != nullptr; }

  struct Impl;  // opaque: defined in tokenizer_impl.h for the tokenizer's own sources

 private:
  friend struct TokenizerAccess;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  const Impl& impl() const;

  std::shared_ptr<const Impl> impl_;
};

}  // namespace vlm
