// What the engine is asked and what it answers. A request is a prompt (token ids in which each image contributes
// image_tokens() placeholder ids, image after image) with its images and sampling settings; its answer holds `n`
// completions, or the error that rejected the request alone.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "data/io/content_hash.h"
#include "infer/sampler.h"

namespace vlm::infer {

struct ImageInput {
  Tensor pixels;         // f32 [C, H, W], preprocessed as the model was trained (any device)
  ImageContentHash key;  // image_key(encoded bytes, preprocessing): what prefix and embedding caches match on
};

struct Request {
  std::string id;  // echoed in the output and named in errors
  std::vector<int32_t> prompt;
  std::vector<ImageInput> images;
  SamplingParams sampling;
};

struct Completion {
  std::vector<int32_t> tokens;  // generated ids (a stop id that ended generation included)
  std::vector<float> logprobs;  // log p of each generated token under the model (when sampling.logprobs >= 0)
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;  // per token, when sampling.logprobs > 0
  std::string text;                 // detokenized output without a final stop id and cut before a stop string (when the
                                    // engine has a detokenizer)
  std::string finish_reason;        // "stop" (stop id or string), "length" (max_tokens or the context limit)
  std::vector<double> token_times;  // seconds since the request was added, one per generated token (not for beams)
  double score = 0;                 // beam search: summed log-probability of `tokens`
};

struct RequestOutput {
  int64_t request = -1;  // the engine's number for it (Engine::add_request's result)
  std::string id;
  Status status;                        // not ok: the request was rejected (no completions)
  std::vector<Completion> completions;  // sampling.n of them
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens whose KV came from the prefix cache (first admission)
};

}  // namespace vlm::infer
