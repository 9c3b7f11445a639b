// The requests `vlm generate` reads and the answers it writes, as JSON lines. A request line:
//   {"id": "q1", "prompt": "what color is the square?", "images": ["a.jpg"], "max_tokens": 32, "temperature": 0.7,
//    "top_k": 40, "top_p": 0.9, "min_p": 0.05, "repetition_penalty": 1.1, "frequency_penalty": 0.2,
//    "presence_penalty": 0.1, "seed": 7, "n": 2, "stop": ["\n"], "stop_token_ids": [2], "logprobs": 3,
//    "beam_width": 4, "length_penalty": 1.0}
// Only "prompt" is required; the others default to the command line's settings. Unknown keys are errors (a typo
// should not silently change nothing). An answer line holds the id and the completions, or the error.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "infer/request.h"
#include "infer/sampler.h"

namespace vlm::infer {

struct RequestSpec {
  std::string id;
  std::string prompt;               // the user's text (the chat template is applied later)
  std::vector<std::string> images;  // image files, in the order their placeholders come
  SamplingParams sampling;
};

// One JSON line. `defaults` fills what the line leaves out; a line without "id" gets `fallback_id`. Errors
// (parse_error / invalid_argument) name the key and are prefixed with `where` (e.g. "in.jsonl:12").
Expected<RequestSpec> parse_request_line(std::string_view line, const SamplingParams& defaults,
                                         const std::string& fallback_id, const std::string& where);

// The "id" of a request line, as parse_request_line reads it, however bad the rest is (`fallback_id` when the line
// is not a JSON object or has no usable id): what an error answer is filed under.
std::string request_line_id(std::string_view line, const std::string& fallback_id);

// The answer as one JSON line (no newline): {"id", "prompt_tokens", "cached_prompt_tokens", "completions": [{"text",
// "tokens", "finish_reason", "score" (beam search), "logprobs" and "top_logprobs" (when asked for; per token
// [[id, logprob], ...])}]}, or {"id", "error"}.
std::string answer_line(const RequestOutput& out);

}  // namespace vlm::infer
