// Model FLOPs of one training sample of a VLM: 3 x forward, forward = 2 x matmul MACs + attention (causal counted
// as half), the LM head on the text positions only. The same formula as bench/peers/train_nanovlm.py's
// model_flops_per_sample(), so TFLOP/s and MFU compare directly with the peer.
#pragma once

#include "model/model_config.h"

namespace vlm::bench {

inline double train_flops_per_sample(const ModelConfig& c, int text_tokens) {
  const double p = c.vision.n_patches(), t = c.image_tokens() + text_tokens;
  const double vw = c.vision.hidden, vm = c.vision.mlp_hidden, vl = c.vision.layers;
  const double vit_layer = 4 * vw * vw + 2 * vw * vm;
  const double patch_embed = 3.0 * c.vision.patch_size * c.vision.patch_size * vw;
  const double vit = 2 * p * (vl * vit_layer + patch_embed) + vl * 4 * p * p * vw;
  const double r2 = c.projector.pixel_shuffle * c.projector.pixel_shuffle;
  const double lw = c.text.hidden, hd = c.text.head_dim();
  const double proj = 2.0 * c.image_tokens() * (vw * r2) * lw;
  const double lm_layer = 2 * lw * lw + 2 * lw * c.text.kv_heads * hd + 3 * lw * c.text.intermediate;
  const double lm = 2 * t * c.text.layers * lm_layer + c.text.layers * 4 * t * t * lw / 2;
  const double head = 2.0 * text_tokens * lw * c.text.vocab_size;
  return 3.0 * (vit + proj + lm + head);
}

}  // namespace vlm::bench
