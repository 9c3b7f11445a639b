// Tokenizer: file I/O, the encode pipeline (added tokens -> normalizer -> pre-tokenizer -> cached BPE), decode,
// id lookups, and finalize_tokenizer (validation of added tokens and the derived lookup tables).
#include "data/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/tokenizer_impl.h"
#include "data/tokenizer/unicode.h"

namespace vlm {
namespace {

// Pre-tokenizes one stretch of normalized text without added tokens and BPE-encodes every piece (cached).
// `at_start`: the stretch begins the input (Metaspace's prepend_scheme "first").
void encode_plain(const Tokenizer::Impl& impl, std::string_view text, bool at_start, std::vector<int32_t>& out) {
  thread_local std::vector<std::string> pieces;
  pieces.clear();
  tok::pre_tokenize(impl.pre_tokenizer, text, at_start, pieces);
  for (const std::string& piece : pieces) {
    if (impl.cache.lookup(piece, out)) continue;
    size_t start = out.size();
    impl.model.encode_word(piece, out);
    impl.cache.insert(piece, out.data() + start, out.size() - start);
  }
}

}  // namespace

const Tokenizer::Impl& Tokenizer::impl() const {
  VLM_CHECK(impl_ != nullptr, "Tokenizer used before load()/from_json_text()/train_bpe()");
  return *impl_;
}

Expected<Tokenizer> Tokenizer::load(const std::string& path_or_dir) {
  std::error_code ec;
  std::string path = std::filesystem::is_directory(path_or_dir, ec) ? path_or_dir + "/tokenizer.json" : path_or_dir;
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(str(path, ": cannot open tokenizer file"));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return io_error(str(path, ": read failed"));
  return from_json_text(buf.str(), path);
}

Expected<Tokenizer> Tokenizer::from_json_text(std::string_view json_text, const std::string& source_name) {
  VLM_ASSIGN_OR_RETURN(std::shared_ptr<Impl> impl, parse_tokenizer_json(json_text, source_name));
  return Tokenizer(std::move(impl));
}

std::string Tokenizer::to_json_text() const { return tokenizer_json_text(impl()); }

Status Tokenizer::save(const std::string& path) const {
  std::string text = to_json_text();
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return io_error(str(path, ": cannot open for writing"));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) return io_error(str(path, ": write failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return io_error(str(path, ": cannot rename ", tmp, " into place"));
  return Status();
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  const Impl& im = impl();
  std::vector<tok::TextSegment> segments, norm_segments;
  if (im.raw_matcher.empty()) {
    segments.push_back({0, text.size(), -1});
  } else {
    im.raw_matcher.split(text, segments);
  }
  for (const tok::TextSegment& seg : segments) {
    if (seg.token_id >= 0) {
      out.push_back(seg.token_id);
      continue;
    }
    std::string normalized = tok::normalize(im.normalizers, text.substr(seg.begin, seg.end - seg.begin));
    if (im.normalized_matcher.empty()) {
      encode_plain(im, normalized, seg.begin == 0, out);
      continue;
    }
    norm_segments.clear();
    im.normalized_matcher.split(normalized, norm_segments);
    for (const tok::TextSegment& n : norm_segments) {
      if (n.token_id >= 0) {
        out.push_back(n.token_id);
      } else {
        encode_plain(im, std::string_view(normalized).substr(n.begin, n.end - n.begin), seg.begin == 0 && n.begin == 0,
                     out);
      }
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& im = impl();
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids.insert(ids.end(), im.post_prefix.begin(), im.post_prefix.end());
  encode_append(text, ids);
  if (add_special_tokens) ids.insert(ids.end(), im.post_suffix.begin(), im.post_suffix.end());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const Impl& im = impl();
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= im.vocab_size) continue;
    int32_t added = id < static_cast<int32_t>(im.added_index_of_id.size()) ? im.added_index_of_id[id] : -1;
    if (added >= 0) {
      const tok::AddedToken& t = im.added_tokens[added];
      if (skip_special_tokens && t.special) continue;
      tokens.push_back(t.content);
    } else if (im.model.has_id(id)) {
      tokens.push_back(im.model.id_to_token(id));
    }
  }
  if (!im.has_decoder) {  // Hugging Face joins tokens with spaces when there is no decoder
    std::string out;
    for (const std::string& t : tokens) out += (out.empty() ? "" : " ") + t;
    return out;
  }
  return tok::decode_tokens(im.decoders, std::move(tokens));
}

std::string Tokenizer::token_bytes(int32_t id) const { return decode({id}, false); }

int32_t Tokenizer::vocab_size() const { return impl().vocab_size; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const Impl& im = impl();
  auto it = im.added_id_of_content.find(std::string(token));
  if (it != im.added_id_of_content.end()) return it->second;
  return im.model.token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const Impl& im = impl();
  if (id < 0 || id >= im.vocab_size) return {};
  if (id < static_cast<int32_t>(im.added_index_of_id.size()) && im.added_index_of_id[id] >= 0) {
    return im.added_tokens[im.added_index_of_id[id]].content;
  }
  return im.model.id_to_token(id);
}

bool Tokenizer::is_special(int32_t id) const {
  const Impl& im = impl();
  if (id < 0 || id >= static_cast<int32_t>(im.added_index_of_id.size())) return false;
  int32_t index = im.added_index_of_id[id];
  return index >= 0 && im.added_tokens[index].special;
}

std::vector<int32_t> Tokenizer::special_ids() const {
  std::vector<int32_t> ids;
  for (const tok::AddedToken& t : impl().added_tokens) {
    if (t.special) ids.push_back(t.id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

namespace {
std::optional<int32_t> first_special(const Tokenizer& t, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    std::optional<int32_t> id = t.token_to_id(name);
    if (id && t.is_special(*id)) return id;
  }
  return std::nullopt;
}
}  // namespace

std::optional<int32_t> Tokenizer::bos_id() const {
  const Impl& im = impl();
  if (!im.post_prefix.empty()) return im.post_prefix.front();
  return first_special(*this, {"<|begin_of_text|>", "<s>", "<|endoftext|>"});
}

std::optional<int32_t> Tokenizer::eos_id() const {
  return first_special(*this, {"<|end_of_text|>", "</s>", "<|endoftext|>"});
}

std::optional<int32_t> Tokenizer::pad_id() const {
  return first_special(*this, {"<pad>", "<|pad|>", "<|finetune_right_pad_id|>"});
}

Status finalize_tokenizer(Tokenizer::Impl& impl, const std::string& source) {
  auto fail = [&](const std::string& field, const std::string& msg) {
    return parse_error(str(source, ": ", field, ": ", msg));
  };
  int32_t span = impl.model.id_span();
  for (size_t i = 0; i < impl.added_tokens.size(); ++i) {
    const tok::AddedToken& t = impl.added_tokens[i];
    std::string field = str("added_tokens[", i, "]");
    if (t.id < 0 || t.id >= (1 << 24)) return fail(field + ".id", str("id ", t.id, " out of range [0, 16777215]"));
    if (t.content.empty()) return fail(field + ".content", "empty");
    if (impl.model.has_id(t.id) && impl.model.id_to_token(t.id) != t.content) {
      return fail(field, str("id ", t.id, " is '", impl.model.id_to_token(t.id), "' in model.vocab, not '", t.content, "'"));
    }
    span = std::max(span, t.id + 1);
  }
  if (span > static_cast<int64_t>(impl.model.token_count() + impl.added_tokens.size()) + 65536) {
    return fail("added_tokens", str("id ", span - 1, " out of range: far above the ", impl.model.token_count(),
                                    " + ", impl.added_tokens.size(), " tokens (ids must be dense)"));
  }
  impl.vocab_size = span;
  impl.added_index_of_id.assign(static_cast<size_t>(span), -1);
  impl.added_id_of_content.clear();
  for (size_t i = 0; i < impl.added_tokens.size(); ++i) {
    const tok::AddedToken& t = impl.added_tokens[i];
    std::string field = str("added_tokens[", i, "]");
    if (impl.added_index_of_id[t.id] >= 0) return fail(field + ".id", str("duplicate id ", t.id));
    if (!impl.added_id_of_content.emplace(t.content, t.id).second) {
      return fail(field + ".content", str("duplicate content '", t.content, "'"));
    }
    impl.added_index_of_id[t.id] = static_cast<int32_t>(i);
  }
  for (int32_t id : impl.post_prefix) {
    if (id < 0 || id >= span) return fail("post_processor", str("special token id ", id, " is not in the vocabulary"));
  }
  for (int32_t id : impl.post_suffix) {
    if (id < 0 || id >= span) return fail("post_processor", str("special token id ", id, " is not in the vocabulary"));
  }

  std::vector<const tok::AddedToken*> raw;
  impl.normalized_added.clear();
  for (const tok::AddedToken& t : impl.added_tokens) {
    if (!t.normalized) {
      raw.push_back(&t);
      continue;
    }
    tok::AddedToken n = t;
    n.content = tok::normalize(impl.normalizers, t.content);
    impl.normalized_added.push_back(std::move(n));
  }
  std::vector<const tok::AddedToken*> normalized;
  for (const tok::AddedToken& t : impl.normalized_added) normalized.push_back(&t);
  impl.raw_matcher.build(raw);
  impl.normalized_matcher.build(normalized);
  return Status();
}

}  // namespace vlm
