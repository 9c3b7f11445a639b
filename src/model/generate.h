// Greedy generation for evaluation: image tokens are computed once, then each step re-runs the decoder over the
// packed prompts of the still-active sequences (answers here are a few tokens; the paged KV-cache engine of the
// inference layer is the fast path for serving).
#pragma once

#include <vector>

#include "model/vlm.h"

namespace vlm {

struct GenerateOptions {
  int max_new_tokens = 16;
  std::vector<int32_t> stop_ids;  // generation of a sequence ends after emitting one of these (it is kept)
};

struct GenerationPrompt {
  std::vector<int32_t> tokens;  // image_tokens() placeholder ids (image_token_id) per image, in order
  std::vector<int> images;      // indices into the `images` batch, one per image of the prompt (may repeat)
};

// Encodes every image of `images` [N, C, H, W] once (prompts may share images) and decodes greedily.
// Returns the generated ids per prompt.
std::vector<std::vector<int32_t>> generate_greedy(VlmModel& model, const Tensor& images,
                                                  const std::vector<GenerationPrompt>& prompts,
                                                  int32_t image_token_id, const GenerateOptions& options);

}  // namespace vlm
