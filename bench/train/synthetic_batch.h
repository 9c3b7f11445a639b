// The training benchmarks' inputs: one packed batch of random pixels and tokens in the shape of the PyTorch peers'
// batches (bench/peers/train_nanovlm.py, fsdp2_peer.py).
#pragma once

#include <cstdint>

#include "core/device.h"
#include "model/vlm.h"

namespace vlm::bench {

// `batch` samples on `dev`, each [image placeholders | text_tokens random tokens] as one packed sequence, the loss on
// every text position's next token (text_tokens targets per sample). `seed` picks the pixels and tokens (ranks of a
// multi-rank benchmark pass different seeds, so each trains on its own samples).
VlmInputs synthetic_batch(const ModelConfig& c, int batch, int text_tokens, Device dev, uint64_t seed = 1234);

}  // namespace vlm::bench
