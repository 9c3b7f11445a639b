// The training benchmarks' synthetic batch (see synthetic_batch.h).
#include "bench/train/synthetic_batch.h"

#include <random>
#include <vector>

namespace vlm::bench {

VlmInputs synthetic_batch(const ModelConfig& c, int batch, int text_tokens, Device dev, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int32_t> token(0, c.text.vocab_size - 1);
  const int img = c.image_tokens(), seq = img + text_tokens;
  const int64_t side = c.vision.image_size;
  std::vector<float> pixels(static_cast<size_t>(batch) * 3 * side * side);
  for (float& p : pixels) p = normal(rng);
  std::vector<int32_t> tokens, positions, cu{0}, image_rows, loss_rows, loss_targets;
  for (int b = 0; b < batch; ++b) {
    const int32_t base = b * seq;
    for (int t = 0; t < seq; ++t) {
      tokens.push_back(t < img ? 0 : token(rng));  // placeholders are replaced by image tokens
      positions.push_back(t);
      if (t < img) image_rows.push_back(base + t);
    }
    // The text positions' next tokens: rows img-1 .. seq-2 predict tokens img .. seq-1 (text_tokens targets).
    for (int t = img - 1; t < seq - 1; ++t) {
      loss_rows.push_back(base + t);
      loss_targets.push_back(tokens[static_cast<size_t>(base + t + 1)]);
    }
    cu.push_back(base + seq);
  }
  auto i32 = [&](const std::vector<int32_t>& v) {
    return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(dev);
  };
  VlmInputs in;
  in.images = Tensor::from_vector(pixels, {batch, 3, side, side}).to(dev);
  in.tokens = i32(tokens);
  in.positions = i32(positions);
  in.cu_seqlens = i32(cu);
  in.max_seqlen = seq;
  in.image_rows = i32(image_rows);
  in.loss_rows = i32(loss_rows);
  in.loss_targets = i32(loss_targets);
  return in;
}

}  // namespace vlm::bench
