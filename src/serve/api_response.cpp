// OpenAI response bodies and stream chunks.
#include "serve/api_response.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace vlm::serve {

namespace {

using json = nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// A token's text as OpenAI reports it, with its UTF-8 bytes (a piece may be part of a character).
json token_entry(const Tokenizer& tok, int32_t id, float logprob) {
  const std::string piece = tok.token_bytes(id);
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return json{{"token", piece}, {"logprob", logprob}, {"bytes", bytes}};
}

json chat_logprobs(const Tokenizer& tok, const std::vector<int32_t>& ids, const std::vector<float>& lps,
                   const std::vector<std::vector<std::pair<int32_t, float>>>& tops) {
  json content = json::array();
  for (size_t i = 0; i < ids.size() && i < lps.size(); ++i) {
    json e = token_entry(tok, ids[i], lps[i]);
    json top = json::array();
    if (i < tops.size())
      for (const auto& [id, lp] : tops[i]) top.push_back(token_entry(tok, id, lp));
    e["top_logprobs"] = top;
    content.push_back(e);
  }
  return json{{"content", content}};
}

json completion_logprobs(const Tokenizer& tok, const std::vector<int32_t>& ids, const std::vector<float>& lps,
                         const std::vector<std::vector<std::pair<int32_t, float>>>& tops) {
  json tokens = json::array(), token_lps = json::array(), top = json::array(), offsets = json::array();
  size_t offset = 0;
  for (size_t i = 0; i < ids.size() && i < lps.size(); ++i) {
    const std::string piece = tok.token_bytes(ids[i]);
    tokens.push_back(piece);
    token_lps.push_back(lps[i]);
    offsets.push_back(offset);
    offset += piece.size();
    json alternatives = json::object();
    if (i < tops.size())
      for (const auto& [id, lp] : tops[i]) alternatives[tok.token_bytes(id)] = lp;
    top.push_back(alternatives);
  }
  return json{{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", top}, {"text_offset", offsets}};
}

json usage(const infer::RequestOutput& out) {
  int64_t generated = 0;
  for (const infer::Completion& c : out.completions) generated += static_cast<int64_t>(c.tokens.size());
  json u = {{"prompt_tokens", out.prompt_tokens},
            {"completion_tokens", generated},
            {"total_tokens", out.prompt_tokens + generated}};
  u["prompt_tokens_details"] = {{"cached_tokens", out.cached_prompt_tokens}};
  return u;
}

json envelope(const ResponseMeta& m, bool chunk) {
  const char* object =
      m.endpoint == Endpoint::chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return json{
      {"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model}, {"system_fingerprint", nullptr}};
}

// The tokens the logprobs cover: the generated ones, without a final stop id (not part of the text).
size_t visible_tokens(const infer::Completion& c, const std::vector<int32_t>& stop_ids) {
  const bool ends_in_stop_id =
      !c.tokens.empty() && std::find(stop_ids.begin(), stop_ids.end(), c.tokens.back()) != stop_ids.end();
  return c.tokens.size() - (ends_in_stop_id ? 1 : 0);
}

}  // namespace

std::string response_body(const ResponseMeta& meta, const infer::RequestOutput& out, const Tokenizer& tokenizer) {
  json j = envelope(meta, false);
  json choices = json::array();
  for (size_t i = 0; i < out.completions.size(); ++i) {
    const infer::Completion& c = out.completions[i];
    json choice = {{"index", i}, {"finish_reason", c.finish_reason}};
    const size_t n = visible_tokens(c, meta.stop_ids);
    const std::vector<int32_t> ids(c.tokens.begin(), c.tokens.begin() + static_cast<std::ptrdiff_t>(n));
    if (meta.endpoint == Endpoint::chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      choice["logprobs"] = meta.logprobs ? chat_logprobs(tokenizer, ids, c.logprobs, c.top_logprobs) : json();
    } else {
      choice["text"] = c.text;
      choice["logprobs"] = meta.logprobs ? completion_logprobs(tokenizer, ids, c.logprobs, c.top_logprobs) : json();
    }
    choices.push_back(choice);
  }
  j["choices"] = choices;
  j["usage"] = usage(out);
  return dump(j);
}

std::string stream_chunk(const ResponseMeta& meta, int index, const std::string& text, bool first,
                         const std::string& finish_reason, const ChunkTokens& tokens, const Tokenizer& tokenizer) {
  json j = envelope(meta, true);
  json choice = {{"index", index}};
  choice["finish_reason"] = finish_reason.empty() ? json() : json(finish_reason);
  if (meta.endpoint == Endpoint::chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first || !tokens.ids.empty()) delta["content"] = text;
    choice["delta"] = delta;
    choice["logprobs"] = meta.logprobs && !tokens.ids.empty()
                             ? chat_logprobs(tokenizer, tokens.ids, tokens.logprobs, tokens.top)
                             : json();
  } else {
    choice["text"] = text;
    choice["logprobs"] = meta.logprobs && !tokens.ids.empty()
                             ? completion_logprobs(tokenizer, tokens.ids, tokens.logprobs, tokens.top)
                             : json();
  }
  j["choices"] = json::array({choice});
  return "data: " + dump(j) + "\n\n";
}

std::string stream_usage_chunk(const ResponseMeta& meta, const infer::RequestOutput& out) {
  json j = envelope(meta, true);
  j["choices"] = json::array();
  j["usage"] = usage(out);
  return "data: " + dump(j) + "\n\n";
}

std::string stream_error_event(const std::string& error_body) { return "data: " + error_body + "\n\n"; }

namespace {
// Bytes at the end of `s` that start a UTF-8 character the string does not complete.
size_t incomplete_utf8_tail(const std::string& s) {
  for (size_t k = 1; k <= 3 && k <= s.size(); ++k) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - k]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > k ? k : 0;
  }
  return 0;
}
}  // namespace

std::string TextStreamer::push(int32_t token) {
  tokens_.push_back(token);
  const std::string text = tokenizer_.decode(tokens_);
  size_t safe = text.size() - incomplete_utf8_tail(text);
  for (const std::string& stop : stops_) {
    const size_t at = text.find(stop);
    if (at != std::string::npos) safe = std::min(safe, at);
    for (size_t k = std::min(stop.size() - 1, text.size()); k > 0; --k)
      if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
        safe = std::min(safe, text.size() - k);
        break;
      }
  }
  if (safe <= sent_ || text.compare(0, sent_, sent_text_) != 0) return "";
  std::string delta = text.substr(sent_, safe - sent_);
  sent_text_ += delta;
  sent_ = safe;
  return delta;
}

std::string TextStreamer::finish(const std::string& final_text) {
  if (final_text.size() <= sent_ || final_text.compare(0, sent_, sent_text_) != 0) return "";
  std::string rest = final_text.substr(sent_);
  sent_text_ = final_text;
  sent_ = final_text.size();
  return rest;
}

}  // namespace vlm::serve
