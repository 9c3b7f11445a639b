// Parsing and checking OpenAI request bodies.
#include "serve/api_request.h"

#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <tuple>

#include "serve/base64.h"

namespace vlm::serve {

namespace {

using json = nlohmann::json;

const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string type_name(const json& v) { return v.type_name(); }

ApiError read_number(const json& j, const char* key, double lo, double hi, float* out) {
  const json* v = field(j, key);
  if (!v) return {};
  if (!v->is_number()) return bad_request(key, std::string("'") + key + "' must be a number, not " + type_name(*v));
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi))
    return bad_request(key, std::string("'") + key + "' = " + v->dump() + " is outside [" + json(lo).dump() + ", " +
                                json(hi).dump() + "]");
  *out = static_cast<float>(d);
  return {};
}

// An integer in [lo, hi]; a float with an integral value is accepted (JavaScript clients send 2.0 as 2 anyway).
ApiError read_int(const json& j, const char* key, int64_t lo, int64_t hi, int64_t* out) {
  const json* v = field(j, key);
  if (!v) return {};
  bool integral = v->is_number_integer();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    integral = std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18;
  }
  if (!integral) return bad_request(key, std::string("'") + key + "' must be an integer, not " + v->dump());
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    x = u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else {
    x = static_cast<int64_t>(v->get<double>());
  }
  if (x < lo || x > hi)
    return bad_request(key, std::string("'") + key + "' = " + std::to_string(x) + " is outside [" + std::to_string(lo) +
                                ", " + std::to_string(hi) + "]");
  *out = x;
  return {};
}

ApiError read_bool(const json& j, const char* key, bool* out) {
  const json* v = field(j, key);
  if (!v) return {};
  if (!v->is_boolean()) return bad_request(key, std::string("'") + key + "' must be true or false, not " + v->dump());
  *out = v->get<bool>();
  return {};
}

#define VLM_API_TRY(expr)    \
  do {                       \
    ApiError e_ = (expr);    \
    if (!e_.ok()) return e_; \
  } while (0)

// data:image/png;base64,.... -> the encoded image.
ApiError read_image_url(const std::string& url, const std::string& param, const RequestLimits& limits, ApiImage* out) {
  if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0) {
    if (!limits.allow_remote_images)
      return bad_request(param,
                         "remote image URLs are not fetched (the server runs without --allow-remote-images); send "
                         "the image inline as a data: URL (data:image/png;base64,...)",
                         "remote_image_refused");
    out->url = url;
    out->param = param;
    return {};
  }
  if (url.rfind("data:", 0) != 0) return bad_request(param, "an image URL must be a data: URL", "invalid_image_url");
  const size_t comma = url.find(',');
  if (comma == std::string::npos)
    return bad_request(param, "a data: URL needs a ',' before its data", "invalid_image_url");
  std::string header = url.substr(5, comma - 5);
  for (char& c : header) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string suffix = ";base64";
  if (header.size() < suffix.size() || header.compare(header.size() - suffix.size(), suffix.size(), suffix) != 0)
    return bad_request(param, "the image's data: URL must be base64 (data:image/png;base64,...)", "invalid_image_url");
  const std::string media = header.substr(0, header.size() - suffix.size());
  if (media != "image/png" && media != "image/jpeg" && media != "image/jpg" && media != "image/webp")
    return bad_request(param, "image type '" + media + "' is not supported (image/png, image/jpeg, image/webp)",
                       "unsupported_image_type");
  const std::string_view data = std::string_view(url).substr(comma + 1);
  if (base64_decoded_size(data) > limits.max_image_bytes)
    return too_large(param, "the image is " + std::to_string(base64_decoded_size(data)) + " bytes, over the limit of " +
                                std::to_string(limits.max_image_bytes));
  auto bytes = base64_decode(data, limits.max_image_bytes);
  if (!bytes) return bad_request(param, "the image data is not valid base64", "invalid_base64");
  if (bytes->empty()) return bad_request(param, "the image is empty", "invalid_image");
  out->bytes = std::move(*bytes);
  out->param = param;
  return {};
}

ApiError read_messages(const json& j, const RequestLimits& limits, ApiRequest* out) {
  const json* msgs = field(j, "messages");
  if (!msgs) return bad_request("messages", "'messages' is required");
  if (!msgs->is_array()) return bad_request("messages", "'messages' must be a list, not " + type_name(*msgs));
  if (msgs->empty()) return bad_request("messages", "'messages' is empty");
  if (msgs->size() > limits.max_messages)
    return bad_request("messages", "more than " + std::to_string(limits.max_messages) + " messages");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad_request(at, at + " must be an object, not " + type_name(m));
    const json* role = field(m, "role");
    if (!role || !role->is_string()) return bad_request(at + ".role", at + ".role must be a string");
    ApiMessage msg;
    msg.role = role->get<std::string>();
    if (msg.role == "developer") msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
      return bad_request(at + ".role", "role '" + msg.role + "' is not system, developer, user or assistant");
    const json* content = field(m, "content");
    if (!content) {
      if (msg.role != "assistant") return bad_request(at + ".content", at + ".content is required");
    } else if (content->is_string()) {
      msg.text = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t k = 0; k < content->size(); ++k) {
        const json& part = (*content)[k];
        const std::string pat = at + ".content[" + std::to_string(k) + "]";
        if (!part.is_object()) return bad_request(pat, pat + " must be an object, not " + type_name(part));
        const json* type = field(part, "type");
        if (!type || !type->is_string()) return bad_request(pat + ".type", pat + ".type must be a string");
        const std::string t = type->get<std::string>();
        if (t == "text") {
          const json* text = field(part, "text");
          if (!text || !text->is_string()) return bad_request(pat + ".text", pat + ".text must be a string");
          if (!msg.text.empty()) msg.text += "\n";
          msg.text += text->get<std::string>();
        } else if (t == "image_url") {
          if (msg.role != "user") return bad_request(pat, "images go in user messages, not " + msg.role + " ones");
          const json* iu = field(part, "image_url");
          std::string param = pat + ".image_url";
          const json* url = nullptr;
          if (iu && iu->is_string()) {
            url = iu;
          } else if (iu && iu->is_object()) {
            url = field(*iu, "url");
            param += ".url";
          }
          if (!url || !url->is_string()) return bad_request(param, param + " must be a string (a data: URL)");
          if (static_cast<int>(out->images.size()) >= limits.max_images)
            return bad_request(param, "more than " + std::to_string(limits.max_images) + " images in one request",
                               "too_many_images");
          ApiImage image;
          VLM_API_TRY(read_image_url(url->get<std::string>(), param, limits, &image));
          out->images.push_back(std::move(image));
          ++msg.images;
        } else {
          return bad_request(pat + ".type", "content part type '" + t + "' is not supported (text, image_url)");
        }
      }
    } else {
      return bad_request(at + ".content",
                         at + ".content must be a string or a list of parts, not " + type_name(*content));
    }
    out->messages.push_back(std::move(msg));
  }
  if (out->messages.back().role != "user")
    return bad_request("messages", "the last message must be the user's (the model answers it)");
  return {};
}

ApiError read_beam_search(const json& j, const RequestLimits& limits, ApiRequest* out);

ApiError read_sampling(const json& j, const RequestLimits& limits, ApiRequest* out) {
  infer::SamplingParams& s = out->sampling;
  int64_t v = 0;
  s.max_tokens = limits.default_max_tokens;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {  // the newer name wins when both are given
    v = -1;
    VLM_API_TRY(read_int(j, key, 1, limits.max_tokens, &v));
    if (v > 0) s.max_tokens = static_cast<int>(v);
  }
  VLM_API_TRY(read_number(j, "temperature", 0, 2, &s.temperature));
  VLM_API_TRY(read_number(j, "top_p", 1e-6, 1, &s.top_p));
  VLM_API_TRY(read_number(j, "min_p", 0, 1, &s.min_p));
  VLM_API_TRY(read_number(j, "frequency_penalty", -2, 2, &s.frequency_penalty));
  VLM_API_TRY(read_number(j, "presence_penalty", -2, 2, &s.presence_penalty));
  VLM_API_TRY(read_number(j, "repetition_penalty", 1e-3, 10, &s.repetition_penalty));
  v = 0;
  VLM_API_TRY(read_int(j, "top_k", 0, 1 << 30, &v));
  s.top_k = static_cast<int>(v);
  v = 1;
  VLM_API_TRY(read_int(j, "n", 1, limits.max_n, &v));
  s.n = static_cast<int>(v);
  if (field(j, "seed")) {
    VLM_API_TRY(read_int(j, "seed", INT64_MIN, INT64_MAX, &v));
    s.seed = static_cast<uint64_t>(v);
  }
  if (const json* stop = field(j, "stop")) {
    std::vector<std::string> stops;
    if (stop->is_string()) {
      stops.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const json& e : *stop) {
        if (!e.is_string()) return bad_request("stop", "'stop' must be a string or a list of strings");
        stops.push_back(e.get<std::string>());
      }
    } else {
      return bad_request("stop", "'stop' must be a string or a list of strings, not " + type_name(*stop));
    }
    if (static_cast<int>(stops.size()) > limits.max_stop)
      return bad_request("stop", "at most " + std::to_string(limits.max_stop) + " stop strings");
    for (const std::string& t : stops)
      if (t.empty()) return bad_request("stop", "a stop string is empty");
    s.stop = std::move(stops);
  }
  if (out->endpoint == Endpoint::chat) {
    VLM_API_TRY(read_bool(j, "logprobs", &out->logprobs));
    v = 0;
    VLM_API_TRY(read_int(j, "top_logprobs", 0, limits.max_top_logprobs, &v));
    out->top_logprobs = static_cast<int>(v);
    if (out->top_logprobs > 0 && !out->logprobs)
      return bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  } else if (field(j, "logprobs")) {
    v = 0;
    VLM_API_TRY(read_int(j, "logprobs", 0, limits.max_top_logprobs, &v));
    out->logprobs = true;
    out->top_logprobs = static_cast<int>(v);
  }
  s.logprobs = out->logprobs ? out->top_logprobs : -1;
  VLM_API_TRY(read_bool(j, "ignore_eos", &out->ignore_eos));
  VLM_API_TRY(read_beam_search(j, limits, out));
  if (Status st = s.validate(); !st.ok()) return bad_request("", st.message());
  return {};
}

// vLLM's beam search fields: use_beam_search, best_of (the width; n when left out), length_penalty. A best_of or
// length_penalty that would change a sampled request is refused rather than ignored.
ApiError read_beam_search(const json& j, const RequestLimits& limits, ApiRequest* out) {
  infer::SamplingParams& s = out->sampling;
  VLM_API_TRY(read_bool(j, "use_beam_search", &out->use_beam_search));
  int64_t best_of = 0;
  VLM_API_TRY(read_int(j, "best_of", 1, 1 << 20, &best_of));
  VLM_API_TRY(read_number(j, "length_penalty", -10, 10, &s.length_penalty));
  if (!out->use_beam_search) {
    if (best_of > 1 && best_of != s.n)
      return bad_request("best_of",
                         "'best_of' = " + std::to_string(best_of) +
                             " is supported with beam search only (set 'use_beam_search': true; it is the beam width)");
    if (s.length_penalty != 1.f)
      return bad_request("length_penalty", "'length_penalty' applies to beam search; set 'use_beam_search': true");
    return {};
  }
  const bool width_from_best_of = best_of > 0;
  const int64_t width = width_from_best_of ? best_of : s.n;
  const char* width_param = width_from_best_of ? "best_of" : "n";
  if (width > limits.max_beam_width)
    return bad_request(width_param, "the beam width ('" + std::string(width_param) + "' = " + std::to_string(width) +
                                        ") is over this server's limit of " + std::to_string(limits.max_beam_width) +
                                        " (--max-beam-width)");
  if (width < 2)
    return bad_request(width_param,
                       "beam search needs a width of 2 or more ('best_of', or 'n' when best_of is left "
                       "out); a width of 1 is greedy decoding: leave 'use_beam_search' out");
  if (s.n > width)
    return bad_request("n", "'n' = " + std::to_string(s.n) + " exceeds the beam width 'best_of' = " +
                                std::to_string(width) + " (beam search returns the n best of best_of beams)");
  auto refuse = [](const char* param, const std::string& why) {
    return bad_request(param, std::string("'") + param + "' " + why + " (beam search is deterministic)");
  };
  if (s.temperature != 0.f) return refuse("temperature", "must be 0 (or left out) with 'use_beam_search'");
  if (s.top_p != 1.f) return refuse("top_p", "must be 1 (or left out) with 'use_beam_search'");
  if (s.top_k != 0) return refuse("top_k", "must be 0 (or left out) with 'use_beam_search'");
  if (s.min_p != 0.f) return refuse("min_p", "must be 0 (or left out) with 'use_beam_search'");
  for (auto [param, value, neutral] : {std::tuple{"frequency_penalty", s.frequency_penalty, 0.f},
                                       std::tuple{"presence_penalty", s.presence_penalty, 0.f},
                                       std::tuple{"repetition_penalty", s.repetition_penalty, 1.f}})
    if (value != neutral) return refuse(param, "is not applied by beam search; leave it out");
  if (!s.stop.empty())
    return bad_request("stop",
                       "'stop' strings are not supported with 'use_beam_search' (hypotheses end at the model's "
                       "end of turn or at max_tokens)");
  if (out->logprobs) return bad_request("logprobs", "'logprobs' is not supported with 'use_beam_search'");
  s.beam_width = static_cast<int>(width);
  return {};
}

}  // namespace

ApiError parse_api_request(Endpoint endpoint, std::string_view body, const RequestLimits& limits, ApiRequest* out) {
  *out = ApiRequest{};
  out->endpoint = endpoint;
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    return bad_request("", std::string("the body is not valid JSON: ") + e.what(), "invalid_json");
  }
  if (!j.is_object()) return bad_request("", "the body must be a JSON object, not " + type_name(j), "invalid_json");
  if (const json* model = field(j, "model")) {
    if (!model->is_string()) return bad_request("model", "'model' must be a string");
    out->model = model->get<std::string>();
  }
  for (const char* key : {"tools", "functions", "tool_choice", "function_call"})
    if (const json* v = field(j, key);
        v && !(v->is_string() && v->get<std::string>() == "none") && !(v->is_array() && v->empty()))
      return bad_request(key, std::string("'") + key + "' is not supported by this server");
  if (const json* rf = field(j, "response_format")) {
    const json* type = rf->is_object() ? field(*rf, "type") : nullptr;
    if (!type || !type->is_string() || type->get<std::string>() != "text")
      return bad_request("response_format", "only {\"type\": \"text\"} is supported");
  }
  VLM_API_TRY(read_bool(j, "stream", &out->stream));
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) return bad_request("stream_options", "'stream_options' must be an object");
    if (!out->stream) return bad_request("stream_options", "'stream_options' needs 'stream': true");
    const json* iu = field(*so, "include_usage");
    if (iu && !iu->is_boolean()) return bad_request("stream_options.include_usage", "must be true or false");
    out->include_usage = iu && iu->get<bool>();
  }
  if (endpoint == Endpoint::chat) {
    VLM_API_TRY(read_messages(j, limits, out));
  } else {
    const json* p = field(j, "prompt");
    if (!p) return bad_request("prompt", "'prompt' is required");
    if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
    if (!p->is_string()) return bad_request("prompt", "'prompt' must be a string (or a list of one string)");
    out->prompt = p->get<std::string>();
    if (out->prompt.empty()) return bad_request("prompt", "'prompt' is empty");
  }
  return read_sampling(j, limits, out);
}

}  // namespace vlm::serve
