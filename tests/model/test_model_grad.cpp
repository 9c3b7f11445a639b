// Whole-model gradient check: the analytic gradients of forward_backward against central finite differences of
// forward_loss, for sampled elements of every parameter tensor of a tiny VLM (vision, projector, tied decoder).
#include <gtest/gtest.h>

#include <cmath>

#include "core/philox.h"
#include "model/generate.h"
#include "model/vlm.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

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
  in.images = testing::random_normal({3, 3, c.vision.image_size, c.vision.image_size}, seed + 1);
  in.tokens = t(tokens);
  in.positions = t(positions);
  in.cu_seqlens = t(cu);
  in.max_seqlen = 12;
  in.image_rows = t(image_rows);
  in.loss_rows = t(loss_rows);
  in.loss_targets = t(loss_targets);
  return in;
}

void check_gradients(bool tied, int projector_mlp) {
  const ModelConfig c = tiny_config(tied, projector_mlp);
  VlmModel model(c, Device::cpu());
  model.params().init_normal(7, c.init_std);
  const VlmInputs in = make_inputs(c, 3);
  model.params().zero_grads();
  const StepLoss base = model.forward_backward(in, 1.f);
  ASSERT_GT(base.tokens, 0);
  ASSERT_TRUE(std::isfinite(base.loss_sum));
  const StepLoss again = model.forward_loss(in);
  EXPECT_EQ(base.loss_sum, again.loss_sum);  // forward is deterministic and independent of backward

  Philox pick(11);
  const float eps = 1e-2f;
  for (auto& p : model.params().all()) {
    float* w = p.value.data<float>();
    const float* g = p.grad.data<float>();
    double diff2 = 0, ref2 = 0;
    const int samples = std::min<int64_t>(6, p.value.numel());
    for (int s = 0; s < samples; ++s) {
      const int64_t i = static_cast<int64_t>(pick.uniform_int(static_cast<uint64_t>(p.value.numel())));
      const float saved = w[i];
      w[i] = saved + eps;
      const double up = model.forward_loss(in).loss_sum;
      w[i] = saved - eps;
      const double down = model.forward_loss(in).loss_sum;
      w[i] = saved;
      const double numeric = (up - down) / (2.0 * eps);
      diff2 += (numeric - g[i]) * (numeric - g[i]);
      ref2 += numeric * numeric + static_cast<double>(g[i]) * g[i];
    }
    // Relative error, with an absolute floor for gradients that are zero in exact arithmetic (the key bias:
    // softmax is invariant to a per-query constant) where float32 finite differences only see rounding noise.
    const double rel = std::sqrt(diff2) / std::max(std::sqrt(ref2), 5e-2);
    EXPECT_LT(rel, 2e-2) << p.name << " (tied=" << tied << "): |diff| " << std::sqrt(diff2) << " |ref| "
                         << std::sqrt(ref2);
  }
}

TEST(ModelGrad, WholeModelMatchesFiniteDifferencesTied) { check_gradients(true, 0); }
TEST(ModelGrad, WholeModelMatchesFiniteDifferencesUntiedMlpProjector) { check_gradients(false, 24); }

TEST(ModelGrad, GradientsAccumulateAcrossCalls) {
  const ModelConfig c = tiny_config(true, 0);
  VlmModel model(c, Device::cpu());
  model.params().init_normal(7, c.init_std);
  const VlmInputs in = make_inputs(c, 3);
  model.params().zero_grads();
  model.forward_backward(in, 0.5f);
  std::vector<Tensor> once;
  for (auto& p : model.params().all()) once.push_back(p.grad.clone());
  model.forward_backward(in, 0.5f);
  size_t i = 0;
  for (auto& p : model.params().all()) {
    Tensor twice = once[i++].clone();
    float* t = twice.data<float>();
    for (int64_t k = 0; k < twice.numel(); ++k) t[k] *= 2.f;
    EXPECT_TRUE(testing::all_close(p.grad, twice, 1e-5, 1e-7)) << p.name;
  }
}

TEST(ModelGrad, FrozenPartsGetNoGradient) {
  const ModelConfig c = tiny_config(true, 0);
  VlmModel model(c, Device::cpu());
  model.params().init_normal(7, c.init_std);
  for (auto& p : model.params().all())
    if (p.group != ParamGroup::projector) p.trainable = false;
  model.params().zero_grads();
  model.forward_backward(make_inputs(c, 3), 1.f);
  for (auto& p : model.params().all()) {
    double s = 0;
    for (int64_t k = 0; k < p.grad.numel(); ++k) s += std::fabs(p.grad.data<float>()[k]);
    if (p.group == ParamGroup::projector)
      EXPECT_GT(s, 0) << p.name;
    else
      EXPECT_EQ(s, 0) << p.name;
  }
}

TEST(Model, GreedyGenerationStopsAndIsDeterministic) {
  const ModelConfig c = tiny_config(true, 0);
  VlmModel model(c, Device::cpu());
  model.params().init_normal(9, c.init_std);
  const int32_t image_id = 5;
  std::vector<GenerationPrompt> prompts = {{{1, image_id, image_id, image_id, image_id, 7}, {0}},
                                           {{2, 3, image_id, image_id, image_id, image_id}, {1}}};
  Tensor images = testing::random_normal({2, 3, 16, 16}, 4);
  GenerateOptions o;
  o.max_new_tokens = 5;
  auto a = generate_greedy(model, images, prompts, image_id, o);
  auto b = generate_greedy(model, images, prompts, image_id, o);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a[0].size(), 5u);
  // Stopping on the first generated token ends that sequence after one token.
  o.stop_ids = {a[0][0]};
  auto s = generate_greedy(model, images, prompts, image_id, o);
  EXPECT_EQ(s[0].size(), 1u);
  // Generation of one prompt alone gives the same tokens as within the batch (packing is exact).
  GenerationPrompt alone = prompts[1];
  alone.images = {0};
  auto solo = generate_greedy(model, images.slice(0, 1, 2).clone(), {alone}, image_id, GenerateOptions{5, {}});
  EXPECT_EQ(solo[0], a[1]);
  // Two prompts sharing one image.
  std::vector<GenerationPrompt> shared = {prompts[1], prompts[1]};
  shared[0].images = shared[1].images = {1};
  auto sh = generate_greedy(model, images, shared, image_id, GenerateOptions{5, {}});
  EXPECT_EQ(sh[0], a[1]);
  EXPECT_EQ(sh[1], a[1]);
}

}  // namespace
}  // namespace vlm
