// Byte-trie matching of added tokens with Hugging Face's leftmost-longest semantics and strip/single-word rules.
#include "data/tokenizer/added_tokens.h"

#include <algorithm>

#include "data/tokenizer/unicode.h"

namespace vlm::tok {
namespace {

// Word characters for single_word (Hugging Face uses the regex \w): letters, numbers and '_'.
bool is_word_char(uint32_t cp) { return cp == '_' || is_letter(cp) || is_number(cp); }

// The character that ends just before byte `end` (end > 0).
uint32_t char_before(std::string_view s, size_t end) {
  for (size_t back = 1; back <= 4 && back <= end; ++back) {
    unsigned char b = static_cast<unsigned char>(s[end - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep going back
    Utf8Char ch = utf8_decode(s, end - back);
    return ch.len == back ? ch.cp : kInvalidCodepoint;
  }
  return kInvalidCodepoint;
}

// Start of the run of whitespace that ends at byte `end`, not going below `floor`.
size_t whitespace_start_before(std::string_view s, size_t end, size_t floor) {
  size_t start = end;
  while (start > floor) {
    uint32_t cp = char_before(s, start);
    if (cp == kInvalidCodepoint || !is_whitespace(cp)) break;
    size_t len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    if (start - len < floor) break;
    start -= len;
  }
  return start;
}

size_t whitespace_end_after(std::string_view s, size_t begin) {
  size_t pos = begin;
  while (pos < s.size()) {
    Utf8Char ch = utf8_decode(s, pos);
    if (ch.cp == kInvalidCodepoint || !is_whitespace(ch.cp)) break;
    pos += ch.len;
  }
  return pos;
}

}  // namespace

void AddedTokenMatcher::build(const std::vector<const AddedToken*>& tokens) {
  tokens_.clear();
  edges_.clear();
  terminal_.assign(1, -1);
  for (bool& f : first_byte_) f = false;
  for (const AddedToken* t : tokens) {
    if (t->content.empty()) continue;
    int32_t index = static_cast<int32_t>(tokens_.size());
    tokens_.push_back(t);
    int32_t node = 0;
    for (char c : t->content) {
      uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(c);
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        int32_t child = static_cast<int32_t>(terminal_.size());
        terminal_.push_back(-1);
        it = edges_.emplace(key, child).first;
      }
      node = it->second;
    }
    if (terminal_[node] < 0) terminal_[node] = index;  // the first of duplicate contents wins
    first_byte_[static_cast<unsigned char>(t->content[0])] = true;
  }
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t& match_end) const {
  int32_t best = -1;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (terminal_[node] >= 0) {
      best = terminal_[node];
      match_end = i + 1;
    }
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSegment>& out) const {
  size_t emitted = 0;  // end of the last segment pushed
  size_t pos = 0;
  while (pos < text.size()) {
    size_t match_end = 0;
    int32_t index = first_byte_[static_cast<unsigned char>(text[pos])] ? longest_at(text, pos, match_end) : -1;
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = *tokens_[index];
    size_t start = pos, stop = match_end;
    if (tok.single_word) {
      bool left_ok = start == 0 || !is_word_char(char_before(text, start));
      bool right_ok = stop == text.size() || !is_word_char(utf8_decode(text, stop).cp);
      if (!left_ok || !right_ok) {
        pos = match_end;  // like the Aho-Corasick scan, do not look for another match inside this one
        continue;
      }
    }
    if (tok.lstrip) start = whitespace_start_before(text, start, emitted);
    if (tok.rstrip) stop = whitespace_end_after(text, stop);
    if (start > emitted) out.push_back({emitted, start, -1});
    out.push_back({start, stop, tok.id});
    emitted = stop;
    pos = std::max(stop, match_end);
  }
  if (emitted < text.size()) out.push_back({emitted, text.size(), -1});
}

}  // namespace vlm::tok
