// Whole-model gradient check: the analytic gradients of forward_backward against central finite differences of
// forward_loss, for sampled elements of every parameter tensor of a tiny VLM (vision, projector, tied decoder).
#include <gtest/gtest.h>

#include <cmath>

#include "core/philox.h"
#include "kernels/ops.h"
#include "model/generate.h"
#include "model/vlm.h"
#include "model_fixture.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

using testing::make_inputs;
using testing::tiny_config;

void check_gradients(bool tied, int projector_mlp) {
  const ModelConfig c = tiny_config(tied, projector_mlp);
  VlmModel model(c, Device::cpu());
  model.params().init_normal(7, c.init_std);
  const VlmInputs in = make_inputs(c, 3);
  model.params().zero_grads();
  const StepLoss base = model.forward_backward(in, 1.f);
  ASSERT_GT(base.tokens(), 0);
  ASSERT_TRUE(std::isfinite(base.loss_sum()));
  const StepLoss again = model.forward_loss(in);
  EXPECT_EQ(base.loss_sum(), again.loss_sum());  // forward is deterministic and independent of backward

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
      const double up = model.forward_loss(in).loss_sum();
      w[i] = saved - eps;
      const double down = model.forward_loss(in).loss_sum();
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

TEST(Model, ChunkedLossEqualsTheCrossEntropyOfTheLogits) {
  const ModelConfig c = tiny_config(false, 24);
  VlmModel model(c, Device::cpu());
  model.init_weights(5);
  EXPECT_EQ(model.compute_dtype(), DType::f32);
  for (const auto& p : model.params().all()) EXPECT_FALSE(p.compute.defined()) << p.name << ": fp32 has no copies";
  const VlmInputs in = make_inputs(c, 3);
  // The reference: full logits at the loss rows (the generation path), then the plain cross-entropy op.
  Tensor logits = model.logits_at_rows(in, model.encode_images(in.images), in.loss_rows);
  ASSERT_EQ(logits.dtype(), DType::f32);
  Tensor losses = Tensor::empty({logits.dim(0)}, DType::f32);
  ops::cross_entropy_forward(losses, logits, in.loss_targets, -100);
  double expected = 0;
  for (int64_t i = 0; i < losses.numel(); ++i) expected += losses.data<float>()[i];
  const StepLoss got = model.forward_loss(in);
  EXPECT_EQ(got.tokens(), in.loss_rows.numel());
  EXPECT_EQ(got.loss_sum(), expected);  // the same ops in the same order: bit for bit on the CPU
  model.params().zero_grads();
  EXPECT_EQ(model.forward_backward(in, 1.f).loss_sum(), expected);
}

TEST(ModelDeathTest, Bf16NeedsCuda) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(VlmModel(tiny_config(true, 0), Device::cpu(), DType::bf16), "bf16 on cuda");
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

// The image token is never generated: an untrained model whose favourite next token is made the image token must
// pick another one. (A generated image token used to be read as a placeholder of an image the prompt did not have:
// an eval early in a training run crashed on it.)
TEST(Model, GreedyGenerationNeverEmitsTheImageToken) {
  const ModelConfig c = tiny_config(true, 0);
  VlmModel model(c, Device::cpu());
  model.params().init_normal(9, c.init_std);
  const Tensor images = testing::random_normal({1, 3, 16, 16}, 4);
  auto prompt = [&](int32_t image_id) {  // 1, the image's placeholders, 7 (placeholders do not change the logits)
    GenerationPrompt p;
    p.tokens.push_back(1);
    p.tokens.insert(p.tokens.end(), static_cast<size_t>(c.image_tokens()), image_id);
    p.tokens.push_back(7);
    p.images = {0};
    return p;
  };
  const std::vector<std::vector<int32_t>> first = generate_greedy(model, images, {prompt(5)}, 5, {1, {}});
  const int32_t favourite = first[0][0];
  ASSERT_NE(favourite, 1);  // (the prompt's own tokens must stay text)
  ASSERT_NE(favourite, 7);
  const std::vector<std::vector<int32_t>> out = generate_greedy(model, images, {prompt(favourite)}, favourite, {6, {}});
  ASSERT_EQ(out[0].size(), 6u);
  for (int32_t id : out[0]) EXPECT_NE(id, favourite);
}

}  // namespace
}  // namespace vlm
