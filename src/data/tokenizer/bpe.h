// The BPE model: vocabulary, ranked merges and the word encoder. A word (one pre-tokenized piece) starts as one
// symbol per byte (byte-level vocabularies: GPT-2, Llama-3, Qwen2, SmolLM2) or per character (SentencePiece-style
// vocabularies: Mistral, Llama-2; characters missing from the vocabulary become <0xAB> byte tokens with
// byte_fallback, else unk) and is merged greedily, always applying the lowest-rank merge present (leftmost on
// ties), as Hugging Face's BPE::merge_word does with its priority queue. WordCache memoizes words.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace vlm::tok {

struct BpeOptions {
  std::optional<std::string> unk_token;  // id used for bytes missing from the vocabulary; dropped when unset
  bool fuse_unk = false;                 // consecutive unknown bytes share one unk id
  bool ignore_merges = false;            // a word that is itself in the vocabulary is emitted as one id (Llama-3)
  bool byte_fallback = false;            // characters missing from the vocabulary become <0xAB> tokens
  bool byte_level = true;                // symbols are bytes in GPT-2's alphabet (else UTF-8 characters)
};

struct MergeTarget {
  int32_t rank;
  int32_t id;  // id of the merged token
};

class BpeModel {
 public:
  BpeModel() = default;
  // `vocab` maps token strings (byte-level spelling) to ids; `merges` are token pairs in rank order. Errors name
  // the offending field relative to the model object ("vocab: ...", "merges[12]: ...").
  static Expected<BpeModel> create(const std::vector<std::pair<std::string, int32_t>>& vocab,
                                   const std::vector<std::pair<std::string, std::string>>& merges,
                                   BpeOptions options);

  // Appends the ids of `word` (raw bytes) to `out`.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  const BpeOptions& options() const { return options_; }
  // Number of ids the vocabulary spans: max id + 1 (ids without a token in between are holes).
  int32_t id_span() const { return static_cast<int32_t>(id_to_token_.size()); }
  size_t token_count() const { return vocab_.size(); }
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Empty string for a hole or an id outside the span.
  const std::string& id_to_token(int32_t id) const;
  bool has_id(int32_t id) const { return id >= 0 && id < id_span() && has_id_[id]; }
  // Merges in rank order, as (left id, right id).
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  BpeOptions options_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> has_id_;
  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::unordered_map<uint64_t, MergeTarget> merge_map_;
  int32_t byte_ids_[256] = {};      // id of the single-byte token for each byte, or -1
  int32_t fallback_ids_[256] = {};  // id of "<0xAB>" for each byte, or -1
  int32_t unk_id_ = -1;
};

// Thread-safe memo of word -> ids, sharded to keep lock contention low when many loader threads encode at once.
// A shard that grows past its capacity is cleared.
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 256;  // longer words are not cached
  bool lookup(std::string_view word, std::vector<int32_t>& out) const;  // appends on a hit
  void insert(std::string_view word, const int32_t* ids, size_t n);

 private:
  static constexpr size_t kShards = 16;
  static constexpr size_t kShardCapacity = 8192;
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  Shard shards_[kShards];
};

}  // namespace vlm::tok
