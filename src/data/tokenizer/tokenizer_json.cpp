// tokenizer.json -> Tokenizer::Impl. Every error names the source file and the JSON field; features of the format
// this implementation does not have (WordPiece models, Lowercase normalizers, Whitespace pre-tokenizers, ...) are
// reported as `unsupported` naming the type, malformed content (a regex that does not compile included) as
// `parse_error`.
#include <nlohmann/json.hpp>

#include "data/tokenizer/tokenizer_impl.h"

namespace vlm {
namespace {

using nlohmann::json;

class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}

  Status bad(const std::string& field, const std::string& msg) const {
    return parse_error(str(source_, ": ", field, ": ", msg));
  }
  Status no(const std::string& field, const std::string& msg) const {
    return unsupported(str(source_, ": ", field, ": ", msg));
  }

  // Optional members: absent or null keeps the default; the wrong type is an error.
  Status opt_bool(const json& obj, const char* key, const std::string& field, bool& out) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return Status();
    if (!it->is_boolean()) return bad(field + "." + key, "expected a boolean");
    out = it->get<bool>();
    return Status();
  }
  Status opt_string(const json& obj, const char* key, const std::string& field, std::optional<std::string>& out) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return Status();
    if (!it->is_string()) return bad(field + "." + key, "expected a string or null");
    out = it->get<std::string>();
    return Status();
  }
  Status type_of(const json& obj, const std::string& field, std::string& type) const {
    if (!obj.is_object()) return bad(field, "expected an object or null");
    auto it = obj.find("type");
    if (it == obj.end()) return bad(field + ".type", "missing");
    if (!it->is_string()) return bad(field + ".type", "expected a string");
    type = it->get<std::string>();
    return Status();
  }

 private:
  const std::string& source_;
};

Status parse_added_tokens(const Reader& r, const json& root, Tokenizer::Impl& impl) {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return Status();
  if (!it->is_array()) return r.bad("added_tokens", "expected an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& e = (*it)[i];
    std::string field = str("added_tokens[", i, "]");
    if (!e.is_object()) return r.bad(field, "expected an object");
    tok::AddedToken t;
    auto id = e.find("id");
    if (id == e.end() || !id->is_number_integer()) return r.bad(field + ".id", "missing or not an integer");
    int64_t v = id->get<int64_t>();
    if (v < 0 || v >= (int64_t{1} << 24)) return r.bad(field + ".id", str("id ", v, " out of range [0, 16777215]"));
    t.id = static_cast<int32_t>(v);
    auto content = e.find("content");
    if (content == e.end() || !content->is_string()) return r.bad(field + ".content", "missing or not a string");
    t.content = content->get<std::string>();
    VLM_RETURN_IF_ERROR(r.opt_bool(e, "special", field, t.special));
    t.normalized = !t.special;  // Hugging Face's default when the flag is absent
    VLM_RETURN_IF_ERROR(r.opt_bool(e, "single_word", field, t.single_word));
    VLM_RETURN_IF_ERROR(r.opt_bool(e, "lstrip", field, t.lstrip));
    VLM_RETURN_IF_ERROR(r.opt_bool(e, "rstrip", field, t.rstrip));
    VLM_RETURN_IF_ERROR(r.opt_bool(e, "normalized", field, t.normalized));
    impl.added_tokens.push_back(std::move(t));
  }
  return Status();
}

// A Replace pattern: {"String": s} or {"Regex": r}.
Status parse_pattern(const Reader& r, const json& obj, const std::string& field, std::string& literal,
                     std::shared_ptr<const tok::Regex>& regex) {
  auto pat = obj.find("pattern");
  if (pat == obj.end() || !pat->is_object()) return r.bad(field + ".pattern", "missing or not an object");
  if (auto lit = pat->find("String"); lit != pat->end()) {
    if (!lit->is_string()) return r.bad(field + ".pattern.String", "expected a string");
    literal = lit->get<std::string>();
    return Status();
  }
  if (auto re = pat->find("Regex"); re != pat->end()) {
    if (!re->is_string()) return r.bad(field + ".pattern.Regex", "expected a string");
    Expected<std::shared_ptr<const tok::Regex>> compiled = tok::Regex::compile(re->get<std::string>());
    if (!compiled.ok()) return r.bad(field + ".pattern.Regex", compiled.status().message());
    regex = std::move(compiled).value();
    return Status();
  }
  return r.bad(field + ".pattern", "expected {\"String\": ...} or {\"Regex\": ...}");
}

Status parse_normalizer(const Reader& r, const json& n, const std::string& field, std::vector<tok::NormalizerStep>& out) {
  if (n.is_null()) return Status();
  std::string type;
  VLM_RETURN_IF_ERROR(r.type_of(n, field, type));
  tok::NormalizerStep step;
  if (type == "Sequence") {
    auto list = n.find("normalizers");
    if (list == n.end() || !list->is_array()) return r.bad(field + ".normalizers", "missing or not an array");
    for (size_t i = 0; i < list->size(); ++i) {
      VLM_RETURN_IF_ERROR(parse_normalizer(r, (*list)[i], str(field, ".normalizers[", i, "]"), out));
    }
    return Status();
  }
  if (type == "NFC") {
    step.kind = tok::NormalizerKind::nfc;
  } else if (type == "Prepend") {
    step.kind = tok::NormalizerKind::prepend;
    auto p = n.find("prepend");
    if (p == n.end() || !p->is_string()) return r.bad(field + ".prepend", "missing or not a string");
    step.text = p->get<std::string>();
  } else if (type == "Replace") {
    step.kind = tok::NormalizerKind::replace;
    VLM_RETURN_IF_ERROR(parse_pattern(r, n, field, step.text, step.regex));
    auto c = n.find("content");
    if (c == n.end() || !c->is_string()) return r.bad(field + ".content", "missing or not a string");
    step.content = c->get<std::string>();
  } else if (type == "Strip") {
    step.kind = tok::NormalizerKind::strip;
    step.strip_left = step.strip_right = true;
    VLM_RETURN_IF_ERROR(r.opt_bool(n, "strip_left", field, step.strip_left));
    VLM_RETURN_IF_ERROR(r.opt_bool(n, "strip_right", field, step.strip_right));
  } else {
    return r.no(field + ".type", str("normalizer '", type,
                                     "' is not supported (supported: NFC, Prepend, Replace, Strip, Sequence)"));
  }
  out.push_back(std::move(step));
  return Status();
}

Status parse_pre_tokenizer(const Reader& r, const json& p, const std::string& field, Tokenizer::Impl& impl) {
  if (p.is_null()) return Status();
  std::string type;
  VLM_RETURN_IF_ERROR(r.type_of(p, field, type));
  tok::PreTokenizerStep step;
  if (type == "Sequence") {
    impl.pre_tokenizer_is_sequence = true;
    auto list = p.find("pretokenizers");
    if (list == p.end() || !list->is_array()) return r.bad(field + ".pretokenizers", "missing or not an array");
    for (size_t i = 0; i < list->size(); ++i) {
      VLM_RETURN_IF_ERROR(parse_pre_tokenizer(r, (*list)[i], str(field, ".pretokenizers[", i, "]"), impl));
    }
    return Status();
  }
  if (type == "ByteLevel") {
    step.kind = tok::PreTokenizerKind::byte_level;
    step.add_prefix_space = true;  // Hugging Face's defaults
    VLM_RETURN_IF_ERROR(r.opt_bool(p, "add_prefix_space", field, step.add_prefix_space));
    VLM_RETURN_IF_ERROR(r.opt_bool(p, "trim_offsets", field, step.trim_offsets));
    VLM_RETURN_IF_ERROR(r.opt_bool(p, "use_regex", field, step.use_regex));
  } else if (type == "Digits") {
    step.kind = tok::PreTokenizerKind::digits;
    VLM_RETURN_IF_ERROR(r.opt_bool(p, "individual_digits", field, step.individual_digits));
  } else if (type == "Split") {
    step.kind = tok::PreTokenizerKind::split;
    auto pat = p.find("pattern");
    if (pat == p.end() || !pat->is_object()) return r.bad(field + ".pattern", "missing or not an object");
    if (auto re = pat->find("Regex"); re != pat->end()) {
      if (!re->is_string()) return r.bad(field + ".pattern.Regex", "expected a string");
      step.pattern = re->get<std::string>();
      if (!tok::split_regex_from_pattern(step.pattern, step.regex)) {
        Expected<std::shared_ptr<const tok::Regex>> compiled = tok::Regex::compile(step.pattern);
        if (!compiled.ok()) return r.bad(field + ".pattern.Regex", compiled.status().message());
        step.regex = tok::SplitRegex::pcre2;
        step.compiled = std::move(compiled).value();
      }
    } else if (auto lit = pat->find("String"); lit != pat->end()) {
      if (!lit->is_string()) return r.bad(field + ".pattern.String", "expected a string");
      step.pattern = lit->get<std::string>();
      step.regex = tok::SplitRegex::literal;
    } else {
      return r.bad(field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    }
    auto behavior = p.find("behavior");
    if (behavior == p.end() || !behavior->is_string()) return r.bad(field + ".behavior", "missing or not a string");
    if (!tok::split_behavior_from_name(behavior->get<std::string>(), step.behavior)) {
      return r.bad(field + ".behavior", str("unknown behavior '", behavior->get<std::string>(), "'"));
    }
    VLM_RETURN_IF_ERROR(r.opt_bool(p, "invert", field, step.invert));
  } else if (type == "Metaspace") {
    step.kind = tok::PreTokenizerKind::metaspace;
    if (auto rep = p.find("replacement"); rep != p.end()) {
      if (!rep->is_string() || rep->get<std::string>().empty()) return r.bad(field + ".replacement", "expected a character");
      step.replacement = rep->get<std::string>();
    }
    bool add_prefix_space = true;  // the spelling of tokenizers < 0.19
    VLM_RETURN_IF_ERROR(r.opt_bool(p, "add_prefix_space", field, add_prefix_space));
    step.prepend = add_prefix_space ? tok::PrependScheme::always : tok::PrependScheme::never;
    if (auto scheme = p.find("prepend_scheme"); scheme != p.end() && !scheme->is_null()) {
      std::string v = scheme->is_string() ? scheme->get<std::string>() : "";
      if (v == "always") step.prepend = tok::PrependScheme::always;
      else if (v == "first") step.prepend = tok::PrependScheme::first;
      else if (v == "never") step.prepend = tok::PrependScheme::never;
      else return r.bad(field + ".prepend_scheme", "expected \"always\", \"first\" or \"never\"");
    }
    VLM_RETURN_IF_ERROR(r.opt_bool(p, "split", field, step.metaspace_split));
  } else {
    return r.no(field + ".type", str("pre-tokenizer '", type,
                                     "' is not supported (supported: ByteLevel, Digits, Split, Metaspace, Sequence)"));
  }
  impl.pre_tokenizer.push_back(std::move(step));
  return Status();
}

// Finds the ids of a TemplateProcessing special token by name in its special_tokens map.
Status template_token_ids(const Reader& r, const json& p, const std::string& field, const std::string& name,
                          std::vector<int32_t>& out) {
  auto map = p.find("special_tokens");
  if (map == p.end() || !map->is_object()) return r.bad(field + ".special_tokens", "missing or not an object");
  auto entry = map->find(name);
  if (entry == map->end()) return r.bad(field + ".special_tokens", str("no entry for '", name, "'"));
  auto ids = entry->find("ids");
  if (ids == entry->end() || !ids->is_array()) return r.bad(str(field, ".special_tokens.", name, ".ids"), "missing");
  for (const json& id : *ids) {
    if (!id.is_number_integer()) return r.bad(str(field, ".special_tokens.", name, ".ids"), "expected integers");
    out.push_back(id.get<int32_t>());
  }
  return Status();
}

Status parse_post_processor(const Reader& r, const json& p, const std::string& field, Tokenizer::Impl& impl) {
  if (p.is_null()) return Status();
  std::string type;
  VLM_RETURN_IF_ERROR(r.type_of(p, field, type));
  if (type == "ByteLevel") return Status();  // only trims offsets
  if (type == "Sequence") {
    auto list = p.find("processors");
    if (list == p.end() || !list->is_array()) return r.bad(field + ".processors", "missing or not an array");
    for (size_t i = 0; i < list->size(); ++i) {
      VLM_RETURN_IF_ERROR(parse_post_processor(r, (*list)[i], str(field, ".processors[", i, "]"), impl));
    }
    return Status();
  }
  if (type == "TemplateProcessing") {
    impl.post_prefix.clear();
    impl.post_suffix.clear();
    auto single = p.find("single");
    if (single == p.end() || !single->is_array()) return r.bad(field + ".single", "missing or not an array");
    bool seen_sequence = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const json& item = (*single)[i];
      std::string item_field = str(field, ".single[", i, "]");
      if (item.is_object() && item.contains("Sequence")) {
        seen_sequence = true;
      } else if (item.is_object() && item.contains("SpecialToken") && item["SpecialToken"].is_object() &&
                 item["SpecialToken"].contains("id") && item["SpecialToken"]["id"].is_string()) {
        VLM_RETURN_IF_ERROR(template_token_ids(r, p, field, item["SpecialToken"]["id"].get<std::string>(),
                                               seen_sequence ? impl.post_suffix : impl.post_prefix));
      } else {
        return r.bad(item_field, "expected {\"Sequence\": ...} or {\"SpecialToken\": {\"id\": ...}}");
      }
    }
    return Status();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    impl.post_prefix.clear();
    impl.post_suffix.clear();
    for (const char* key : {"cls", "sep"}) {
      auto e = p.find(key);
      if (e == p.end() || !e->is_array() || e->size() != 2 || !(*e)[1].is_number_integer()) {
        return r.bad(field + "." + key, "expected [token, id]");
      }
      (std::string(key) == "cls" ? impl.post_prefix : impl.post_suffix).push_back((*e)[1].get<int32_t>());
    }
    return Status();
  }
  return r.no(field + ".type", str("post-processor '", type, "' is not supported"));
}

Status parse_decoder(const Reader& r, const json& d, const std::string& field, std::vector<tok::DecoderStep>& out) {
  std::string type;
  VLM_RETURN_IF_ERROR(r.type_of(d, field, type));
  tok::DecoderStep step;
  if (type == "Sequence") {
    auto list = d.find("decoders");
    if (list == d.end() || !list->is_array()) return r.bad(field + ".decoders", "missing or not an array");
    for (size_t i = 0; i < list->size(); ++i) {
      VLM_RETURN_IF_ERROR(parse_decoder(r, (*list)[i], str(field, ".decoders[", i, "]"), out));
    }
    return Status();
  }
  if (type == "ByteLevel") {
    step.kind = tok::DecoderKind::byte_level;
  } else if (type == "ByteFallback") {
    step.kind = tok::DecoderKind::byte_fallback;
  } else if (type == "Fuse") {
    step.kind = tok::DecoderKind::fuse;
  } else if (type == "Replace") {
    step.kind = tok::DecoderKind::replace;
    VLM_RETURN_IF_ERROR(parse_pattern(r, d, field, step.text, step.regex));
    auto c = d.find("content");
    if (c == d.end() || !c->is_string()) return r.bad(field + ".content", "missing or not a string");
    step.content = c->get<std::string>();
  } else if (type == "Strip") {
    step.kind = tok::DecoderKind::strip;
    auto c = d.find("content");
    if (c == d.end() || !c->is_string()) return r.bad(field + ".content", "missing or not a string");
    step.content = c->get<std::string>();
    for (auto [key, dst] : {std::pair{"start", &step.start}, std::pair{"stop", &step.stop}}) {
      auto v = d.find(key);
      if (v == d.end() || !v->is_number_unsigned()) return r.bad(str(field, ".", key), "missing or not a count");
      *dst = static_cast<int>(std::min<uint64_t>(v->get<uint64_t>(), 1 << 20));
    }
  } else if (type == "Metaspace") {
    step.kind = tok::DecoderKind::metaspace;
    step.text = "\xE2\x96\x81";
    if (auto rep = d.find("replacement"); rep != d.end() && rep->is_string()) step.text = rep->get<std::string>();
    bool add_prefix_space = true;
    VLM_RETURN_IF_ERROR(r.opt_bool(d, "add_prefix_space", field, add_prefix_space));
    step.prepend = add_prefix_space;
    if (auto scheme = d.find("prepend_scheme"); scheme != d.end() && scheme->is_string()) {
      step.prepend = scheme->get<std::string>() != "never";
    }
  } else {
    return r.no(field + ".type", str("decoder '", type, "' is not supported (supported: ByteLevel, ByteFallback, "
                                     "Fuse, Replace, Strip, Metaspace, Sequence)"));
  }
  out.push_back(std::move(step));
  return Status();
}

// Whether a ByteLevel step appears in the pre-tokenizer (then the model's symbols are bytes in GPT-2's alphabet).
bool has_byte_level_step(const json& p) {
  if (!p.is_object()) return false;
  auto type = p.find("type");
  if (type != p.end() && type->is_string() && type->get<std::string>() == "ByteLevel") return true;
  auto list = p.find("pretokenizers");
  if (list != p.end() && list->is_array()) {
    for (const json& s : *list) {
      if (has_byte_level_step(s)) return true;
    }
  }
  return false;
}

Status parse_merges(const Reader& r, const json& merges, std::vector<std::pair<std::string, std::string>>& out) {
  if (!merges.is_array()) return r.bad("model.merges", "expected an array");
  out.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {  // legacy form "left right"
      const std::string& s = m.get_ref<const std::string&>();
      size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() || s.find(' ', space + 1) != std::string::npos) {
        return r.bad(str("model.merges[", i, "]"), str("expected \"left right\", got '", s, "'"));
      }
      out.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return r.bad(str("model.merges[", i, "]"), "expected \"left right\" or [\"left\", \"right\"]");
    }
  }
  return Status();
}

Status parse_model(const Reader& r, const json& root, Tokenizer::Impl& impl, const std::string& source) {
  auto pre = root.find("pre_tokenizer");
  bool byte_level = pre != root.end() && has_byte_level_step(*pre);
  auto mit = root.find("model");
  if (mit == root.end() || mit->is_null()) return r.bad("model", "missing");
  const json& m = *mit;
  if (!m.is_object()) return r.bad("model", "expected an object");
  auto type = m.find("type");
  if (type != m.end()) {
    if (!type->is_string()) return r.bad("model.type", "expected a string");
    std::string t = type->get<std::string>();
    if (t == "WordPiece" || t == "WordLevel" || t == "Unigram") {
      return r.no("model.type", str("model type '", t, "' is not supported (only BPE)"));
    }
    if (t != "BPE") return r.bad("model.type", str("unknown model type '", t, "'"));
  }
  auto vocab_it = m.find("vocab");
  if (vocab_it == m.end() || !vocab_it->is_object()) return r.bad("model.vocab", "missing or not an object");
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(vocab_it->size());
  for (auto it = vocab_it->begin(); it != vocab_it->end(); ++it) {
    if (!it->is_number_integer()) return r.bad(str("model.vocab['", it.key(), "']"), "id must be an integer");
    int64_t id = it->get<int64_t>();
    if (id < 0 || id >= (int64_t{1} << 24)) {
      return r.bad(str("model.vocab['", it.key(), "']"), str("id ", id, " out of range [0, 16777215]"));
    }
    vocab.emplace_back(it.key(), static_cast<int32_t>(id));
  }
  auto merges_it = m.find("merges");
  std::vector<std::pair<std::string, std::string>> merges;
  if (merges_it != m.end() && !merges_it->is_null()) VLM_RETURN_IF_ERROR(parse_merges(r, *merges_it, merges));

  tok::BpeOptions options;
  VLM_RETURN_IF_ERROR(r.opt_string(m, "unk_token", "model", options.unk_token));
  VLM_RETURN_IF_ERROR(r.opt_bool(m, "fuse_unk", "model", options.fuse_unk));
  VLM_RETURN_IF_ERROR(r.opt_bool(m, "ignore_merges", "model", options.ignore_merges));
  VLM_RETURN_IF_ERROR(r.opt_bool(m, "byte_fallback", "model", options.byte_fallback));
  options.byte_level = byte_level;
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    std::optional<std::string> affix;
    VLM_RETURN_IF_ERROR(r.opt_string(m, key, "model", affix));
    if (affix && !affix->empty()) return r.no(str("model.", key), str("'", *affix, "' is not supported"));
  }
  if (auto d = m.find("dropout"); d != m.end() && !d->is_null()) {
    if (!d->is_number()) return r.bad("model.dropout", "expected a number or null");
    if (d->get<double>() > 0) return r.no("model.dropout", "BPE dropout is not supported");
  }
  Expected<tok::BpeModel> model = tok::BpeModel::create(vocab, merges, std::move(options));
  if (!model.ok()) return Status(model.status().code(), str(source, ": model.", model.status().message()));
  impl.model = std::move(model).value();
  return Status();
}

}  // namespace

Expected<std::shared_ptr<Tokenizer::Impl>> parse_tokenizer_json(std::string_view text, const std::string& source) {
  Reader r(source);
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return r.bad("root", str("not valid JSON: ", e.what()));
  }
  if (!root.is_object()) return r.bad("root", "expected a JSON object");

  auto impl = std::make_shared<Tokenizer::Impl>();
  VLM_RETURN_IF_ERROR(parse_model(r, root, *impl, source));
  VLM_RETURN_IF_ERROR(parse_added_tokens(r, root, *impl));
  if (auto n = root.find("normalizer"); n != root.end()) {
    VLM_RETURN_IF_ERROR(parse_normalizer(r, *n, "normalizer", impl->normalizers));
    impl->normalizer_json = n->dump();
  }
  if (auto p = root.find("pre_tokenizer"); p != root.end()) {
    VLM_RETURN_IF_ERROR(parse_pre_tokenizer(r, *p, "pre_tokenizer", *impl));
  }
  if (auto p = root.find("post_processor"); p != root.end()) {
    VLM_RETURN_IF_ERROR(parse_post_processor(r, *p, "post_processor", *impl));
    impl->post_processor_json = p->dump();
  }
  impl->decoders.clear();
  auto d = root.find("decoder");
  impl->has_decoder = d != root.end() && !d->is_null();
  if (impl->has_decoder) VLM_RETURN_IF_ERROR(parse_decoder(r, *d, "decoder", impl->decoders));
  impl->decoder_json = impl->has_decoder ? d->dump() : "null";
  VLM_RETURN_IF_ERROR(finalize_tokenizer(*impl, source));
  return impl;
}

}  // namespace vlm
