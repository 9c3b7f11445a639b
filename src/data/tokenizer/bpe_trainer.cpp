// BPE training: word counting through the tokenizer's own pre-tokenizer, then merges driven by a max-heap of
// pair counts with lazy invalidation (an entry whose count changed is re-pushed with the current count) and an
// index from each pair to the words containing it, so a merge only touches the words it changes.
#include "data/tokenizer/bpe_trainer.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/tokenizer_impl.h"
#include "data/tokenizer/unicode.h"

namespace vlm {
namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
int32_t pair_left(uint64_t key) { return static_cast<int32_t>(key >> 32); }
int32_t pair_right(uint64_t key) { return static_cast<int32_t>(key & 0xFFFFFFFFu); }

struct HeapEntry {
  int64_t count;
  uint64_t pair;
};
// Max-heap on count; among equal counts the smaller pair comes first.
bool heap_less(const HeapEntry& a, const HeapEntry& b) {
  return a.count != b.count ? a.count < b.count : a.pair > b.pair;
}

bool valid_utf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    tok::Utf8Char ch = tok::utf8_decode(s, pos);
    if (ch.cp == tok::kInvalidCodepoint) return false;
    pos += ch.len;
  }
  return true;
}

Status check_options(const BpeTrainOptions& o) {
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < o.special_tokens.size(); ++i) {
    const std::string& t = o.special_tokens[i];
    std::string field = str("BpeTrainOptions.special_tokens[", i, "]");
    if (t.empty()) return invalid_argument(field + ": empty");
    if (!valid_utf8(t)) return invalid_argument(field + ": not valid UTF-8");
    if (!seen.insert(t).second) return invalid_argument(str(field, ": duplicate '", t, "'"));
    for (int b = 0; b < 256; ++b) {
      if (t == tok::byte_level_encode(std::string(1, static_cast<char>(b)))) {
        return invalid_argument(str(field, ": '", t, "' is the spelling of a byte symbol"));
      }
    }
  }
  int64_t floor = static_cast<int64_t>(o.special_tokens.size()) + 256;
  if (o.vocab_size < floor) {
    return invalid_argument(str("BpeTrainOptions.vocab_size: ", o.vocab_size, " is below the ", floor,
                                " ids taken by special tokens and byte symbols"));
  }
  return Status();
}

// The trainer's working state: words as symbol-id sequences with their corpus counts, and pair statistics.
struct Trainer {
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> word_counts;
  std::unordered_map<uint64_t, int64_t> pair_counts;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words;  // may hold duplicates; deduplicated on use
  std::vector<HeapEntry> heap;

  void add_pair(uint64_t p, int64_t delta, int32_t word) {
    pair_counts[p] += delta;
    if (delta > 0) pair_words[p].push_back(word);
  }

  void push(uint64_t p, int64_t count) {
    heap.push_back({count, p});
    std::push_heap(heap.begin(), heap.end(), heap_less);
  }

  // Replaces every non-overlapping (a, b) in the words containing it (left to right) by `merged`, updating pair
  // counts, and pushes the pairs the merge created.
  void merge(uint64_t p, int32_t merged) {
    int32_t a = pair_left(p), b = pair_right(p);
    std::vector<int32_t> where = std::move(pair_words[p]);
    pair_words.erase(p);
    std::sort(where.begin(), where.end());
    where.erase(std::unique(where.begin(), where.end()), where.end());
    std::vector<uint64_t> created;
    for (int32_t w : where) {
      std::vector<int32_t>& s = words[w];
      int64_t c = word_counts[w];
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        if (s[i] != a || s[i + 1] != b) continue;
        if (i > 0) {
          add_pair(pair_key(s[i - 1], a), -c, w);
          add_pair(pair_key(s[i - 1], merged), c, w);
          created.push_back(pair_key(s[i - 1], merged));
        }
        if (i + 2 < s.size()) {
          add_pair(pair_key(b, s[i + 2]), -c, w);
          add_pair(pair_key(merged, s[i + 2]), c, w);
          created.push_back(pair_key(merged, s[i + 2]));
        }
        add_pair(p, -c, w);
        s[i] = merged;
        s.erase(s.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      }
    }
    pair_counts.erase(p);
    std::sort(created.begin(), created.end());
    created.erase(std::unique(created.begin(), created.end()), created.end());
    for (uint64_t q : created) {
      auto it = pair_counts.find(q);
      if (it != pair_counts.end() && it->second > 0) push(q, it->second);
    }
  }
};

}  // namespace

Expected<Tokenizer> train_bpe(const std::vector<std::string>& corpus, const BpeTrainOptions& options) {
  VLM_RETURN_IF_ERROR(check_options(options));
  auto impl = std::make_shared<Tokenizer::Impl>();
  if (options.individual_digits) {
    tok::PreTokenizerStep digits;
    digits.kind = tok::PreTokenizerKind::digits;
    digits.individual_digits = true;
    impl->pre_tokenizer.push_back(digits);
  }
  tok::PreTokenizerStep byte_level;
  byte_level.kind = tok::PreTokenizerKind::byte_level;
  byte_level.add_prefix_space = false;
  impl->pre_tokenizer.push_back(byte_level);
  impl->pre_tokenizer_is_sequence = options.individual_digits;
  impl->post_processor_json = R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false,"use_regex":true})";
  const int32_t k = static_cast<int32_t>(options.special_tokens.size());
  for (int32_t i = 0; i < k; ++i) {
    tok::AddedToken t;
    t.id = i;
    t.content = options.special_tokens[i];
    t.special = true;
    t.normalized = false;
    impl->added_tokens.push_back(std::move(t));
  }

  // 1. Count words (pre-tokenized pieces, raw bytes), with special tokens cut out of the text.
  std::vector<const tok::AddedToken*> specials;
  for (const tok::AddedToken& t : impl->added_tokens) specials.push_back(&t);
  tok::AddedTokenMatcher matcher;
  matcher.build(specials);
  std::unordered_map<std::string, int64_t> counts;
  std::vector<tok::TextSegment> segments;
  std::vector<std::string> pieces;
  for (const std::string& text : corpus) {
    segments.clear();
    matcher.split(text, segments);
    for (const tok::TextSegment& seg : segments) {
      if (seg.token_id >= 0) continue;
      pieces.clear();
      tok::pre_tokenize(impl->pre_tokenizer, std::string_view(text).substr(seg.begin, seg.end - seg.begin), seg.begin == 0,
                        pieces);
      for (std::string& p : pieces) ++counts[std::move(p)];
    }
  }

  // 2. Initial symbols: special tokens, then the 256 bytes ordered by their byte-level code point (GPT-2's order).
  std::vector<std::string> token_of_id(options.special_tokens.begin(), options.special_tokens.end());
  std::unordered_map<std::string, int32_t> id_of_token;
  for (int32_t i = 0; i < k; ++i) id_of_token[token_of_id[i]] = i;
  std::vector<int> bytes(256);
  for (int b = 0; b < 256; ++b) bytes[b] = b;
  std::sort(bytes.begin(), bytes.end(), [](int x, int y) {
    return tok::byte_to_codepoint(static_cast<uint8_t>(x)) < tok::byte_to_codepoint(static_cast<uint8_t>(y));
  });
  int32_t byte_id[256];
  for (int b : bytes) {
    byte_id[b] = static_cast<int32_t>(token_of_id.size());
    token_of_id.push_back(tok::byte_level_encode(std::string(1, static_cast<char>(b))));
    id_of_token[token_of_id.back()] = byte_id[b];
  }

  // 3. Words in sorted order (deterministic indices), pair statistics, heap.
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  counts.clear();
  std::sort(sorted.begin(), sorted.end());
  Trainer tr;
  tr.words.reserve(sorted.size());
  for (const auto& [word, count] : sorted) {
    std::vector<int32_t> syms;
    syms.reserve(word.size());
    for (char c : word) syms.push_back(byte_id[static_cast<unsigned char>(c)]);
    int32_t w = static_cast<int32_t>(tr.words.size());
    for (size_t i = 0; i + 1 < syms.size(); ++i) tr.add_pair(pair_key(syms[i], syms[i + 1]), count, w);
    tr.words.push_back(std::move(syms));
    tr.word_counts.push_back(count);
  }
  for (const auto& [p, c] : tr.pair_counts) tr.heap.push_back({c, p});
  std::make_heap(tr.heap.begin(), tr.heap.end(), heap_less);

  // 4. Merge until the vocabulary is full or no pair is frequent enough.
  std::vector<std::pair<std::string, std::string>> merges;
  const int64_t min_count = std::max<int64_t>(options.min_frequency, 1);
  while (static_cast<int32_t>(token_of_id.size()) < options.vocab_size && !tr.heap.empty()) {
    std::pop_heap(tr.heap.begin(), tr.heap.end(), heap_less);
    HeapEntry top = tr.heap.back();
    tr.heap.pop_back();
    auto it = tr.pair_counts.find(top.pair);
    int64_t current = it == tr.pair_counts.end() ? 0 : it->second;
    if (current != top.count) {  // stale entry: queue the pair again with its current count
      if (current > 0) tr.push(top.pair, current);
      continue;
    }
    if (current < min_count) break;
    const std::string& left = token_of_id[pair_left(top.pair)];
    const std::string& right = token_of_id[pair_right(top.pair)];
    std::string merged = left + right;
    merges.emplace_back(left, right);
    auto [found, inserted] = id_of_token.emplace(merged, static_cast<int32_t>(token_of_id.size()));
    if (inserted) token_of_id.push_back(merged);
    tr.merge(top.pair, found->second);
  }

  // 5. Assemble the tokenizer through the same validation a loaded tokenizer.json gets.
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(token_of_id.size());
  for (size_t id = 0; id < token_of_id.size(); ++id) vocab.emplace_back(token_of_id[id], static_cast<int32_t>(id));
  Expected<tok::BpeModel> model = tok::BpeModel::create(vocab, merges, tok::BpeOptions{});
  if (!model.ok()) return internal_error(str("train_bpe: built an invalid model: ", model.status().message()));
  impl->model = std::move(model).value();
  Status st = finalize_tokenizer(*impl, "train_bpe");
  if (!st.ok()) return internal_error(st.message());
  return TokenizerAccess::make(std::move(impl));
}

}  // namespace vlm
