// Tokenizer::Impl -> tokenizer.json in the layout Hugging Face `tokenizers` writes (and reads): version,
// truncation, padding, added_tokens, normalizer, pre_tokenizer, post_processor, decoder, model.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "data/tokenizer/tokenizer_impl.h"

namespace vlm {
namespace {

using ojson = nlohmann::ordered_json;

ojson step_json(const tok::PreTokenizerStep& s) {
  ojson j;
  switch (s.kind) {
    case tok::PreTokenizerKind::byte_level:
      j["type"] = "ByteLevel";
      j["add_prefix_space"] = s.add_prefix_space;
      j["trim_offsets"] = s.trim_offsets;
      j["use_regex"] = s.use_regex;
      break;
    case tok::PreTokenizerKind::digits:
      j["type"] = "Digits";
      j["individual_digits"] = s.individual_digits;
      break;
    case tok::PreTokenizerKind::metaspace:
      j["type"] = "Metaspace";
      j["replacement"] = s.replacement;
      j["prepend_scheme"] = s.prepend == tok::PrependScheme::always  ? "always"
                            : s.prepend == tok::PrependScheme::first ? "first"
                                                                     : "never";
      j["split"] = s.metaspace_split;
      break;
    case tok::PreTokenizerKind::split:
      j["type"] = "Split";
      j["pattern"] = ojson::object({{s.regex == tok::SplitRegex::literal ? "String" : "Regex", s.pattern}});
      j["behavior"] = tok::split_behavior_name(s.behavior);
      j["invert"] = s.invert;
      break;
  }
  return j;
}

std::string quoted(const std::string& s) { return ojson(s).dump(); }

// The model section is written by hand: nlohmann's ordered_json inserts in linear time per key, which is
// quadratic for a 100k-token vocabulary.
void write_model(const tok::BpeModel& model, std::string& out) {
  const tok::BpeOptions& o = model.options();
  out += "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n";
  out += str("    \"unk_token\": ", o.unk_token ? quoted(*o.unk_token) : std::string("null"), ",\n");
  out += "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n";
  out += str("    \"fuse_unk\": ", o.fuse_unk ? "true" : "false", ",\n    \"byte_fallback\": ",
             o.byte_fallback ? "true" : "false", ",\n");
  out += str("    \"ignore_merges\": ", o.ignore_merges ? "true" : "false", ",\n    \"vocab\": {");
  bool first = true;
  for (int32_t id = 0; id < model.id_span(); ++id) {
    if (!model.has_id(id)) continue;
    out += first ? "\n      " : ",\n      ";
    out += quoted(model.id_to_token(id));
    out += ": ";
    out += std::to_string(id);
    first = false;
  }
  out += "\n    },\n    \"merges\": [";
  // The legacy "left right" spelling is read by every tokenizers version; pairs are needed only when a token
  // contains a space (never in byte-level vocabularies).
  bool as_pairs = false;
  for (const auto& [a, b] : model.merges()) {
    as_pairs |= model.id_to_token(a).find(' ') != std::string::npos || model.id_to_token(b).find(' ') != std::string::npos;
  }
  first = true;
  for (const auto& [a, b] : model.merges()) {
    out += first ? "\n      " : ",\n      ";
    const std::string &l = model.id_to_token(a), &r = model.id_to_token(b);
    if (as_pairs) {
      out += '[';
      out += quoted(l);
      out += ", ";
      out += quoted(r);
      out += ']';
    } else {
      out += quoted(str(l, " ", r));
    }
    first = false;
  }
  out += "\n    ]\n  }\n";
}

}  // namespace

std::string tokenizer_json_text(const Tokenizer::Impl& impl) {
  ojson root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  std::vector<const tok::AddedToken*> added;
  for (const tok::AddedToken& t : impl.added_tokens) added.push_back(&t);
  std::stable_sort(added.begin(), added.end(), [](const auto* a, const auto* b) { return a->id < b->id; });
  ojson tokens = ojson::array();
  for (const tok::AddedToken* t : added) {
    tokens.push_back({{"id", t->id},
                      {"content", t->content},
                      {"single_word", t->single_word},
                      {"lstrip", t->lstrip},
                      {"rstrip", t->rstrip},
                      {"normalized", t->normalized},
                      {"special", t->special}});
  }
  root["added_tokens"] = std::move(tokens);
  root["normalizer"] = ojson::parse(impl.normalizer_json);
  if (impl.pre_tokenizer.empty()) {
    root["pre_tokenizer"] = nullptr;
  } else if (impl.pre_tokenizer.size() == 1 && !impl.pre_tokenizer_is_sequence) {
    root["pre_tokenizer"] = step_json(impl.pre_tokenizer[0]);
  } else {
    ojson steps = ojson::array();
    for (const tok::PreTokenizerStep& s : impl.pre_tokenizer) steps.push_back(step_json(s));
    root["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", std::move(steps)}};
  }
  root["post_processor"] = ojson::parse(impl.post_processor_json);
  root["decoder"] = ojson::parse(impl.decoder_json);
  try {
    // Everything but the model as pretty JSON, then the model section appended before the closing brace.
    std::string out = root.dump(2);
    out.resize(out.size() - 2);  // drop "\n}"
    out += ",\n";
    write_model(impl.model, out);
    out += "}\n";
    return out;
  } catch (const ojson::exception& e) {
    VLM_FAIL("tokenizer holds a string that is not valid UTF-8: ", e.what());
  }
}

}  // namespace vlm
