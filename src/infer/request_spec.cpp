// JSON-lines requests and answers of `vlm generate`.
#include "infer/request_spec.h"

#include <nlohmann/json.hpp>

namespace vlm::infer {

namespace {

using json = nlohmann::json;

// Reads key `k` of `j` into `out` when present, checking its JSON type; errors name the key.
template <typename T>
Status read(const json& j, const char* k, T& out, const std::string& where) {
  auto it = j.find(k);
  if (it == j.end()) return Status();
  const bool ok = std::is_same_v<T, std::string> ? it->is_string()
                  : std::is_same_v<T, float>     ? it->is_number()
                  : std::is_same_v<T, uint64_t>  ? it->is_number_unsigned()
                                                 : it->is_number_integer();
  if (!ok) return invalid_argument(where + ": \"" + k + "\" has the wrong type (" + it->type_name() + ")");
  if constexpr (std::is_same_v<T, int>) {
    const int64_t v = it->get<int64_t>();
    if (v < -(int64_t{1} << 30) || v > (int64_t{1} << 30))
      return invalid_argument(where + ": \"" + k + "\" = " + std::to_string(v) + " is out of range");
    out = static_cast<int>(v);
  } else {
    out = it->get<T>();
  }
  return Status();
}

Status read_strings(const json& j, const char* k, std::vector<std::string>& out, const std::string& where,
                    bool one_string_ok) {
  auto it = j.find(k);
  if (it == j.end()) return Status();
  if (one_string_ok && it->is_string()) {  // "stop": "\n" as OpenAI accepts
    out = {it->get<std::string>()};
    return Status();
  }
  if (!it->is_array()) return invalid_argument(where + ": \"" + k + "\" must be a list of strings");
  out.clear();
  for (const json& e : *it) {
    if (!e.is_string()) return invalid_argument(where + ": \"" + k + "\" must be a list of strings");
    out.push_back(e.get<std::string>());
  }
  return Status();
}

}  // namespace

Expected<RequestSpec> parse_request_line(std::string_view line, const SamplingParams& defaults,
                                         const std::string& fallback_id, const std::string& where) {
  const json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return parse_error(where + ": not valid JSON");
  if (!j.is_object()) return parse_error(where + ": a request is a JSON object");
  static const char* kKeys[] = {"id",
                                "prompt",
                                "images",
                                "max_tokens",
                                "temperature",
                                "top_k",
                                "top_p",
                                "min_p",
                                "repetition_penalty",
                                "frequency_penalty",
                                "presence_penalty",
                                "seed",
                                "n",
                                "stop",
                                "stop_token_ids",
                                "logprobs",
                                "beam_width",
                                "length_penalty"};
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const char* k : kKeys) known |= key == k;
    if (!known) return invalid_argument(where + ": unknown key \"" + key + "\"");
  }
  RequestSpec r;
  r.id = fallback_id;
  r.sampling = defaults;
  if (auto it = j.find("id"); it != j.end()) {
    if (it->is_string()) {
      r.id = it->get<std::string>();
    } else if (it->is_number_integer()) {
      r.id = std::to_string(it->get<int64_t>());
    } else {
      return invalid_argument(where + ": \"id\" must be a string or an integer");
    }
  }
  const std::string at = where + " (request '" + r.id + "')";
  if (!j.contains("prompt")) return invalid_argument(at + ": \"prompt\" is required");
  VLM_RETURN_IF_ERROR(read(j, "prompt", r.prompt, at));
  VLM_RETURN_IF_ERROR(read_strings(j, "images", r.images, at, false));
  SamplingParams& s = r.sampling;
  VLM_RETURN_IF_ERROR(read(j, "max_tokens", s.max_tokens, at));
  VLM_RETURN_IF_ERROR(read(j, "temperature", s.temperature, at));
  VLM_RETURN_IF_ERROR(read(j, "top_k", s.top_k, at));
  VLM_RETURN_IF_ERROR(read(j, "top_p", s.top_p, at));
  VLM_RETURN_IF_ERROR(read(j, "min_p", s.min_p, at));
  VLM_RETURN_IF_ERROR(read(j, "repetition_penalty", s.repetition_penalty, at));
  VLM_RETURN_IF_ERROR(read(j, "frequency_penalty", s.frequency_penalty, at));
  VLM_RETURN_IF_ERROR(read(j, "presence_penalty", s.presence_penalty, at));
  VLM_RETURN_IF_ERROR(read(j, "n", s.n, at));
  VLM_RETURN_IF_ERROR(read(j, "logprobs", s.logprobs, at));
  VLM_RETURN_IF_ERROR(read(j, "beam_width", s.beam_width, at));
  VLM_RETURN_IF_ERROR(read(j, "length_penalty", s.length_penalty, at));
  VLM_RETURN_IF_ERROR(read_strings(j, "stop", s.stop, at, true));
  if (j.contains("seed")) {
    uint64_t seed = 0;
    VLM_RETURN_IF_ERROR(read(j, "seed", seed, at));
    s.seed = seed;
  }
  if (auto it = j.find("stop_token_ids"); it != j.end()) {
    if (!it->is_array()) return invalid_argument(at + ": \"stop_token_ids\" must be a list of integers");
    for (const json& e : *it) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX)
        return invalid_argument(at + ": \"stop_token_ids\" must be a list of token ids");
      s.stop_ids.push_back(static_cast<int32_t>(e.get<int64_t>()));
    }
  }
  if (Status v = s.validate(); !v.ok()) return invalid_argument(at + ": " + v.message());
  return r;
}

std::string request_line_id(std::string_view line, const std::string& fallback_id) {
  const json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return fallback_id;
  auto it = j.find("id");
  if (it == j.end()) return fallback_id;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number_integer()) return std::to_string(it->get<int64_t>());
  return fallback_id;
}

std::string answer_line(const RequestOutput& out) {
  json j;
  j["id"] = out.id;
  if (!out.status.ok()) {
    j["error"] = out.status.message();
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  j["prompt_tokens"] = out.prompt_tokens;
  j["cached_prompt_tokens"] = out.cached_prompt_tokens;
  json cs = json::array();
  for (const Completion& c : out.completions) {
    json e;
    e["text"] = c.text;
    e["tokens"] = c.tokens;
    e["finish_reason"] = c.finish_reason;
    if (c.score != 0) e["score"] = c.score;
    if (!c.logprobs.empty()) e["logprobs"] = c.logprobs;
    if (!c.top_logprobs.empty()) {
      json tops = json::array();
      for (const auto& top : c.top_logprobs) {
        json t = json::array();
        for (const auto& [id, lp] : top) t.push_back({id, lp});
        tops.push_back(t);
      }
      e["top_logprobs"] = tops;
    }
    cs.push_back(e);
  }
  j["completions"] = cs;
  // Model output may cut a UTF-8 sequence: replace bad bytes instead of throwing.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace vlm::infer
