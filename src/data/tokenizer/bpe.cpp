// BPE model construction (vocabulary/merge validation) and the priority-queue word encoder.
#include "data/tokenizer/bpe.h"

#include <algorithm>

#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/unicode.h"

namespace vlm::tok {
namespace {

// Ids above this are rejected: they would make the id -> token table absurdly large.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;
// Unused ids tolerated below the largest one, so a corrupt id cannot make the tables huge.
constexpr int64_t kMaxIdHoles = 65536;

struct Symbol {
  int32_t id;
  int32_t prev, next;  // neighbours in the linked list, -1 at the ends
  uint32_t len;        // bytes covered; 0 once merged into its left neighbour
};

struct Candidate {
  int32_t rank;
  int32_t pos;  // index of the left symbol
  int32_t id;   // merged id
};

// Min-heap order: lowest rank first, then leftmost.
bool heap_after(const Candidate& a, const Candidate& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; }

std::string quoted(std::string_view s) { return str("'", s, "'"); }

}  // namespace

Expected<BpeModel> BpeModel::create(const std::vector<std::pair<std::string, int32_t>>& vocab,
                                    const std::vector<std::pair<std::string, std::string>>& merges,
                                    BpeOptions options) {
  BpeModel m;
  m.options_ = std::move(options);
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab) {
    if (id < 0 || id > kMaxTokenId) {
      return parse_error(str("vocab[", quoted(token), "]: id ", id, " out of range [0, ", kMaxTokenId, "]"));
    }
    max_id = std::max(max_id, id);
  }
  if (max_id >= static_cast<int64_t>(vocab.size()) + kMaxIdHoles) {
    return parse_error(str("vocab: id ", max_id, " out of range: only ", vocab.size(), " tokens (ids must be dense)"));
  }
  m.id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  m.has_id_.assign(static_cast<size_t>(max_id + 1), 0);
  m.vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab) {
    if (m.has_id_[id]) {
      return parse_error(str("vocab[", quoted(token), "]: duplicate id ", id, " (also ", quoted(m.id_to_token_[id]), ")"));
    }
    if (!m.vocab_.emplace(token, id).second) return parse_error(str("vocab: duplicate token ", quoted(token)));
    m.id_to_token_[id] = token;
    m.has_id_[id] = 1;
  }

  m.merges_.reserve(merges.size());
  m.merge_map_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto lookup = [&](const std::string& t) { return m.token_to_id(t); };
    std::optional<int32_t> a = lookup(left), b = lookup(right), merged = lookup(left + right);
    if (!a) return parse_error(str("merges[", rank, "]: unknown token ", quoted(left)));
    if (!b) return parse_error(str("merges[", rank, "]: unknown token ", quoted(right)));
    if (!merged) return parse_error(str("merges[", rank, "]: merged token ", quoted(left + right), " is not in vocab"));
    // A repeated pair takes its last rank: Hugging Face collects the merges into a map in order.
    m.merge_map_.insert_or_assign(pair_key(*a, *b), MergeTarget{static_cast<int32_t>(rank), *merged});
    m.merges_.emplace_back(*a, *b);
  }

  for (int b = 0; b < 256; ++b) {
    std::string s;
    byte_level_encode(std::string_view(reinterpret_cast<const char*>(&b), 1), s);
    m.byte_ids_[b] = m.token_to_id(s).value_or(-1);
    static const char kHex[] = "0123456789ABCDEF";
    m.fallback_ids_[b] = m.token_to_id(str("<0x", kHex[b >> 4], kHex[b & 15], ">")).value_or(-1);
  }
  if (m.options_.unk_token) {
    std::optional<int32_t> unk = m.token_to_id(*m.options_.unk_token);
    if (!unk) return parse_error(str("unk_token: ", quoted(*m.options_.unk_token), " is not in vocab"));
    m.unk_id_ = *unk;
  }
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string& BpeModel::id_to_token(int32_t id) const {
  static const std::string kEmpty;
  return has_id(id) ? id_to_token_[id] : kEmpty;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    thread_local std::string spelled;
    spelled.clear();
    if (options_.byte_level) {
      byte_level_encode(word, spelled);
    } else {
      spelled.assign(word);
    }
    if (std::optional<int32_t> id = token_to_id(spelled)) {
      out.push_back(*id);
      return;
    }
  }

  thread_local std::vector<Symbol> syms;
  thread_local std::vector<Candidate> heap;
  syms.clear();
  heap.clear();
  auto push_symbol = [&](int32_t id, uint32_t len) {
    int32_t n = static_cast<int32_t>(syms.size());
    if (n > 0) syms.back().next = n;
    syms.push_back({id, n - 1, -1, len});
  };
  bool pending_unk = false;  // the last symbol is an unk that may still absorb bytes (fuse_unk)
  auto push_unk = [&](uint32_t len) {
    // Without an unk token a symbol missing from the vocabulary is dropped, as in Hugging Face.
    if (unk_id_ < 0) return;
    if (pending_unk && options_.fuse_unk) {
      syms.back().len += len;
    } else {
      push_symbol(unk_id_, len);
      pending_unk = true;
    }
  };
  if (options_.byte_level) {
    for (char c : word) {
      int32_t id = byte_ids_[static_cast<unsigned char>(c)];
      if (id >= 0) {
        push_symbol(id, 1);
        pending_unk = false;
      } else {
        push_unk(1);
      }
    }
  } else {
    for (size_t pos = 0; pos < word.size();) {
      uint32_t len = utf8_decode(word, pos).len;
      std::string_view ch = word.substr(pos, len);
      pos += len;
      if (std::optional<int32_t> id = token_to_id(ch)) {
        push_symbol(*id, len);
        pending_unk = false;
        continue;
      }
      bool all_bytes = options_.byte_fallback;
      for (size_t k = 0; all_bytes && k < ch.size(); ++k) all_bytes = fallback_ids_[static_cast<unsigned char>(ch[k])] >= 0;
      if (all_bytes) {
        for (char c : ch) push_symbol(fallback_ids_[static_cast<unsigned char>(c)], 1);
        pending_unk = false;
      } else {
        push_unk(len);
      }
    }
  }

  auto candidate = [&](int32_t pos) {
    const Symbol& l = syms[pos];
    if (l.next < 0) return;
    auto it = merge_map_.find(pair_key(l.id, syms[l.next].id));
    if (it == merge_map_.end()) return;
    heap.push_back({it->second.rank, pos, it->second.id});
    std::push_heap(heap.begin(), heap.end(), heap_after);
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) candidate(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), heap_after);
    Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = syms[top.pos];
    if (left.len == 0 || left.next < 0) continue;  // merged away, or now the last symbol
    Symbol& right = syms[left.next];
    auto it = merge_map_.find(pair_key(left.id, right.id));
    if (it == merge_map_.end() || it->second.id != top.id) continue;  // stale entry
    left.id = top.id;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (left.next >= 0) syms[left.next].prev = top.pos;
    if (left.prev >= 0) candidate(left.prev);
    candidate(top.pos);
  }
  for (const Symbol& s : syms) {
    if (s.len > 0) out.push_back(s.id);
  }
}

bool WordCache::lookup(std::string_view word, std::vector<int32_t>& out) const {
  const Shard& shard = shards_[std::hash<std::string_view>{}(word) % kShards];
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.map.find(word);
  if (it == shard.map.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::insert(std::string_view word, const int32_t* ids, size_t n) {
  if (word.size() > kMaxWordBytes) return;
  Shard& shard = shards_[std::hash<std::string_view>{}(word) % kShards];
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kShardCapacity) shard.map.clear();
  shard.map.emplace(std::string(word), std::vector<int32_t>(ids, ids + n));
}

}  // namespace vlm::tok
