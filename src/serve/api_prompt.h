// From a parsed OpenAI request to an engine Request: the chat messages become the model's chat-template turns
// (system text joins the next user message; every image placeholder goes into the first user turn, as the model
// was trained), the completions prompt is tokenized as is, and each image is decoded and preprocessed through the
// image pipeline with its pixel-count guard. Errors name the field: 422 for an image that does not decode or is
// over the pixel limit, 400 (context_length_exceeded) for a prompt the context cannot hold.
#pragma once

#include <cstdint>
#include <string>

#include "data/tokenizer/tokenizer.h"
#include "infer/prompt_builder.h"
#include "infer/request.h"
#include "serve/api_request.h"

namespace vlm::serve {

class ApiPromptBuilder {
 public:
  // Both must outlive the builder. `max_context`: tokens per sequence (prompt and output).
  ApiPromptBuilder(const Tokenizer& tokenizer, const infer::PromptBuilder& builder, int64_t max_context)
      : tokenizer_(tokenizer), builder_(builder), max_context_(max_context) {}

  // Thread-safe: called from the HTTP worker threads.
  ApiError build(const ApiRequest& api, const std::string& id, infer::Request* out) const;

 private:
  const Tokenizer& tokenizer_;
  const infer::PromptBuilder& builder_;
  int64_t max_context_;
};

}  // namespace vlm::serve
