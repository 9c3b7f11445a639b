// A tiny VLM configuration and a packed batch for it (two sequences, three images, text targets), shared by the
// CPU gradient checks and the GPU-vs-CPU model tests.
#pragma once

#include <cstdint>

#include "model/vlm.h"

namespace vlm::testing {

// 16 px images of 16 patches, 4 image tokens per image, a 2-layer decoder with GQA; tied embeddings without qkv
// bias, or untied with qkv bias; projector_mlp > 0 gives the MLP projector of that width.
ModelConfig tiny_config(bool tied, int projector_mlp);
// Two sequences: one with an image (4 placeholder rows), one with two images; CPU tensors, images f32.
VlmInputs make_inputs(const ModelConfig& c, uint64_t seed);

}  // namespace vlm::testing
