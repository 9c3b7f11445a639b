// The tiny model configuration and batch of model_fixture.h.
#include "model_fixture.h"

#include <vector>

#include "core/philox.h"
#include "testing/test_util.h"

namespace vlm::testing {

ModelConfig tiny_config(bool tied, int projector_mlp) {
  ModelConfig c;
  c.vision = {16, 4, 3, 16, 2, 2, 32, 1e-6f};  // 16 patches
  c.projector = {2, projector_mlp};            // 4 image tokens per image
  c.text.vocab_size = 29;
  c.text.hidden = 16;
  c.text.layers = 2;
  c.text.heads = 4;
  c.text.kv_heads = 2;
  c.text.intermediate = 24;
  c.text.tie_embeddings = tied;
  c.text.qkv_bias = !tied;  // exercise both
  c.text.max_seq_len = 64;
  c.init_std = 0.3f;  // large enough that every path carries signal
  return c;
}

// Two sequences: one with an image (4 placeholder rows), one with two images.
VlmInputs make_inputs(const ModelConfig& c, uint64_t seed) {
  const int32_t image_id = 5;
  std::vector<int32_t> seq_a = {1, image_id, image_id, image_id, image_id, 7, 8, 9, 10};
  std::vector<int32_t> seq_b = {2, image_id, image_id, image_id, image_id, image_id, image_id, image_id, image_id,
                                11, 12, 13};
  std::vector<int32_t> tokens, positions, cu = {0}, image_rows, loss_rows, loss_targets;
  Philox rng(seed);
  for (const auto& s : {seq_a, seq_b}) {
    const int base = static_cast<int>(tokens.size());
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == image_id) image_rows.push_back(base + static_cast<int>(i));
      tokens.push_back(s[i]);
      positions.push_back(static_cast<int32_t>(i));
      if (i + 1 < s.size() && i >= 5) {  // text rows predict the next token
        loss_rows.push_back(base + static_cast<int>(i));
        loss_targets.push_back(static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(c.text.vocab_size))));
      }
    }
    cu.push_back(static_cast<int32_t>(tokens.size()));
  }
  auto t = [](const std::vector<int32_t>& v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); };
  VlmInputs in;
  in.images = random_normal({3, 3, c.vision.image_size, c.vision.image_size}, seed + 1);
  in.tokens = t(tokens);
  in.positions = t(positions);
  in.cu_seqlens = t(cu);
  in.max_seqlen = 12;
  in.image_rows = t(image_rows);
  in.loss_rows = t(loss_rows);
  in.loss_targets = t(loss_targets);
  return in;
}

}  // namespace vlm::testing
