// A tiny VLM with random weights and a set of prompts (text only, one image, two images, a shared image, shared
// prefixes, lengths across several KV blocks), with what full-recompute greedy decoding (generate_greedy) gives for
// each: the oracle the engine's outputs must equal token for token. Shared by the CPU and GPU engine tests.
#pragma once

#include <memory>
#include <vector>

#include "infer/engine.h"
#include "model/vlm.h"

namespace vlm::testing {

constexpr int32_t kImageToken = 5;

struct EngineCase {
  std::unique_ptr<VlmModel> model;
  std::vector<infer::Request> requests;        // greedy, max_tokens = max_new
  std::vector<std::vector<int32_t>> expected;  // generate_greedy's output per request
  int max_new = 0;
};

// The model on `device` (f32), its weights from `seed`.
EngineCase make_engine_case(Device device, uint64_t seed, int max_new = 10);

// The engine options the CPU tests start from: blocks of 4 tokens, 1 MiB of KV, the fixture's image token, the
// scheduler's invariants checked every step.
infer::EngineOptions small_engine_options();

// Beam search by full recomputation (VlmModel::logits_at_rows over every live beam each step) with the engine's rules:
// 2 * width candidates per beam, endings among the best `width` become hypotheses, early stop at `width`. Text-only
// prompts; the hypotheses best first.
struct Hypothesis {
  double normalized, score;
  std::vector<int32_t> tokens;
};
std::vector<Hypothesis> reference_beam_search(VlmModel& model, const std::vector<int32_t>& prompt, int width,
                                              int max_tokens, float length_penalty);

}  // namespace vlm::testing
