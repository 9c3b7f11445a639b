// Added tokens (special tokens such as <|im_start|> or <image>, and user-added words): found in the text before
// BPE runs and emitted as their own ids. Matching follows Hugging Face's AddedVocabulary: leftmost-longest over a
// byte trie, then the single_word / lstrip / rstrip rules of each token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vlm::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;  // only match when not surrounded by word characters
  bool lstrip = false;       // absorb whitespace on the left
  bool rstrip = false;       // absorb whitespace on the right
  bool normalized = false;   // matched against the normalized text (else against the raw text)
  bool special = false;      // skipped by decode(skip_special_tokens = true)
};

// One piece of a split: raw text (token_id == -1) or an added token covering [begin, end) (whitespace it stripped
// included).
struct TextSegment {
  size_t begin, end;
  int32_t token_id;
};

class AddedTokenMatcher {
 public:
  // Indexes `tokens` (pointers must outlive the matcher). Empty contents are ignored.
  void build(const std::vector<const AddedToken*>& tokens);
  bool empty() const { return tokens_.empty(); }
  // Splits `text` into segments that cover it; consecutive text is one segment.
  void split(std::string_view text, std::vector<TextSegment>& out) const;

 private:
  // Longest token starting at byte `pos`, as an index into tokens_, or -1.
  int32_t longest_at(std::string_view text, size_t pos, size_t& match_end) const;

  std::vector<const AddedToken*> tokens_;
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
  std::vector<int32_t> terminal_;                // node -> index into tokens_, or -1
  bool first_byte_[256] = {};
};

}  // namespace vlm::tok
