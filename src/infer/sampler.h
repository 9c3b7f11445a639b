// Choosing the next token from a row of logits: repetition / frequency / presence penalties, then greedy
// (temperature 0) or sampling at a temperature from what top-k, top-p and min-p keep, drawn from the sequence's own
// Philox stream (the same seed gives the same tokens whatever else shares the batch). Also the chosen token's
// log-probability and the top-N alternatives, from the model's distribution before penalties and temperature.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/philox.h"
#include "core/status.h"

namespace vlm::infer {

struct SamplingParams {
  int max_tokens = 16;             // tokens generated at most (>= 1)
  float temperature = 0.f;         // 0: greedy
  int top_k = 0;                   // keep the k most likely tokens; 0: all
  float top_p = 1.f;               // keep the smallest set of tokens whose probability reaches p; 1: all
  float min_p = 0.f;               // drop tokens less likely than min_p times the most likely one; 0: none
  float repetition_penalty = 1.f;  // > 1 discourages tokens of the prompt and the output (divides positive logits)
  float frequency_penalty = 0.f;   // logit -= count in the output * this
  float presence_penalty = 0.f;    // logit -= this when the token is in the output
  std::optional<uint64_t> seed;    // per-request seed; without it the engine's seed and the request's number
  std::vector<int32_t> stop_ids;   // generation ends after one of these (kept in the output)
  std::vector<std::string> stop;   // generation ends when the text contains one (cut from the text)
  int n = 1;                       // completions of the prompt, forked after the prompt (sharing its KV blocks)
  // > 1: beam search of this width (deterministic; temperature and the filters are not used), returning the n
  // best hypotheses by summed log-probability / length^length_penalty. Beams share their common prefix's blocks.
  int beam_width = 1;
  float length_penalty = 1.f;
  // -1: no log-probabilities (they cost a pass over the vocabulary per token); 0: the chosen token's; N > 0: also
  // the N most likely alternatives.
  int logprobs = -1;

  // invalid_argument naming the first bad field.
  Status validate() const;
};

struct SampledToken {
  int32_t id = -1;
  float logprob = 0.f;                         // log p(id) under the model (when params.logprobs >= 0)
  std::vector<std::pair<int32_t, float>> top;  // the `logprobs` most likely tokens, most likely first
};

// Picks the next token. `logits` f32 [vocab] is overwritten (penalties, scaling). `prompt` and `output` are the
// sequence's tokens so far; `banned` (e.g. the image placeholder, never text) is never chosen when >= 0.
SampledToken sample_token(float* logits, int64_t vocab, const SamplingParams& params,
                          const std::vector<int32_t>& prompt, const std::vector<int32_t>& output, int32_t banned,
                          Philox& rng);

}  // namespace vlm::infer
