// The OpenAI response bodies: chat.completion and text_completion objects, their streaming chunks (server-sent
// events), usage, and log-probabilities in each endpoint's shape; and TextStreamer, which turns a completion's
// tokens into text deltas that never show a stop string or half a UTF-8 character.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer/tokenizer.h"
#include "infer/request.h"
#include "serve/api_request.h"

namespace vlm::serve {

struct ResponseMeta {
  Endpoint endpoint = Endpoint::chat;
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
  bool logprobs = false;
  std::vector<int32_t> stop_ids;  // the request's: a final one is not part of the text nor of the logprobs
};

// The whole answer (non-streaming).
std::string response_body(const ResponseMeta& meta, const infer::RequestOutput& out, const Tokenizer& tokenizer);

// One streamed choice delta as "data: {...}\n\n". `role` only in a chat stream's first chunk; `finish_reason`
// empty until the choice ends; `tokens` (with their log-probabilities) when meta.logprobs.
struct ChunkTokens {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> top;
};
std::string stream_chunk(const ResponseMeta& meta, int index, const std::string& text, bool first,
                         const std::string& finish_reason, const ChunkTokens& tokens, const Tokenizer& tokenizer);
// The usage-only chunk (stream_options.include_usage) and the end marker.
std::string stream_usage_chunk(const ResponseMeta& meta, const infer::RequestOutput& out);
std::string stream_error_event(const std::string& error_body);
inline const char* kStreamDone = "data: [DONE]\n\n";

// Text deltas of one streamed completion. push() takes each generated token (stop ids excluded) and returns the
// text that is now safe to send: the decoded output so far minus a tail that may still become a stop string or
// completes a UTF-8 character. finish() returns what remains of the engine's final text.
class TextStreamer {
 public:
  TextStreamer(const Tokenizer& tokenizer, std::vector<std::string> stops)
      : tokenizer_(tokenizer), stops_(std::move(stops)) {}
  std::string push(int32_t token);
  std::string finish(const std::string& final_text);

 private:
  const Tokenizer& tokenizer_;
  std::vector<std::string> stops_;
  std::vector<int32_t> tokens_;
  size_t sent_ = 0;
  std::string sent_text_;
};

}  // namespace vlm::serve
