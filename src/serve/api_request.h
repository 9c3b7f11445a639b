// The OpenAI request bodies `vlm serve` accepts, parsed and checked before anything else looks at them:
// POST /v1/chat/completions (messages with text and image_url parts) and POST /v1/completions (a text prompt).
// Images arrive as data: URLs (base64 PNG, JPEG or WebP) and are base64-decoded here, bounded by max_image_bytes
// (http(s) URLs are refused unless allowed, then fetched by remote_image.h);
// decoding the pixels (and the pixel-count guard) happens when the prompt is built (api_prompt.h).
// Every error is an ApiError naming the field; unknown keys are ignored as OpenAI's own server does, except those
// asking for what this server cannot do (tools, response formats), which are refused. Beam search is vLLM's
// extension: "use_beam_search": true with "best_of" (the width; default n), "n" (how many of the best come back)
// and "length_penalty".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "infer/sampler.h"
#include "serve/api_error.h"

namespace vlm::serve {

enum class Endpoint { chat, completion };

struct RequestLimits {
  int max_tokens = 4096;                      // largest max_tokens accepted
  int default_max_tokens = 256;               // when the request gives none
  int max_n = 8;                              // completions per request
  int max_beam_width = 8;                     // beam search: beams per request (best_of, or n)
  int max_images = 8;                         // images per request
  size_t max_image_bytes = size_t{20} << 20;  // one encoded image
  int max_stop = 4;                           // stop strings (OpenAI's limit)
  int max_top_logprobs = 20;
  size_t max_messages = 1024;
  bool allow_remote_images = false;  // http(s) image URLs are recorded for fetching (remote_image.h), not refused
};

struct ApiMessage {
  std::string role;  // "system" (or "developer"), "user", "assistant"
  std::string text;  // the text parts, joined by "\n"
  int images = 0;    // image parts of this message
};

struct ApiImage {
  std::string bytes;  // the encoded image (PNG, JPEG or WebP as sent); empty until fetched when `url` is set
  std::string url;    // an http(s) URL to fetch (only with allow_remote_images)
  std::string param;  // where it came from, e.g. "messages[0].content[1].image_url.url"
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::chat;
  std::string model;                 // empty when not given
  std::vector<ApiMessage> messages;  // chat
  std::vector<ApiImage> images;      // chat: every image, in order of appearance
  std::string prompt;                // completion
  infer::SamplingParams sampling;    // max_tokens, temperature, top_p, seed, stop, n, penalties, logprobs
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;       // chat: "logprobs": true; completions: "logprobs": N
  int top_logprobs = 0;
  bool ignore_eos = false;  // vLLM's extension: generate max_tokens whatever the model says (benchmarks)
  // vLLM's extension: beam search of width best_of (or n when best_of is left out), returning the n best hypotheses
  // by summed log-probability / length^length_penalty; sampling.beam_width holds the width. Deterministic, so it
  // refuses the sampling settings (temperature > 0, top_p, top_k, min_p, penalties), stop strings and logprobs.
  bool use_beam_search = false;
};

// Parses a request body for `endpoint` into `out`; the error names the field (ok() when none).
ApiError parse_api_request(Endpoint endpoint, std::string_view body, const RequestLimits& limits, ApiRequest* out);

}  // namespace vlm::serve
