// Per-block activation recomputation on the CPU: forward_backward with Recompute::blocks gives bit-identical losses
// and parameter gradients to Recompute::none (the recomputed forward runs the same deterministic ops on the same
// block inputs), for the vision encoder and the decoder, frozen parts included; and the step's transient memory
// (the CPU allocator's peak over forward_backward) drops by what the blocks no longer keep (measured on the vision
// and text parts alone).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <tuple>

#include "model/vlm.h"
#include "model_fixture.h"
#include "testing/test_util.h"
#include "train/memory_report.h"

namespace vlm {
namespace {

using testing::make_inputs;
using testing::tiny_config;

struct RecomputeRun {
  StepLoss loss;
  std::vector<Tensor> grads;  // in parameter order
  uint64_t activation_peak = 0;
};

RecomputeRun run(const ModelConfig& c, Recompute recompute, const std::vector<std::string>& frozen = {}) {
  VlmModel model(c, Device::cpu());
  model.init_weights(7);
  model.set_recompute(recompute);
  for (const auto& part : frozen)
    for (auto& p : model.params().all())
      if (param_group_name(p.group) == part) p.trainable = false;
  const VlmInputs in = make_inputs(c, 3);
  model.params().zero_grads();
  StepMemoryMeter meter(Device::cpu());
  meter.begin();
  RecomputeRun r;
  r.loss = model.forward_backward(in, 1.f / 3);
  r.activation_peak = meter.end(model.params(), 0, "fp32").activation_peak_bytes;
  for (const auto& p : model.params().all()) r.grads.push_back(p.grad.clone());
  return r;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

void expect_identical(const ModelConfig& c, const std::vector<std::string>& frozen, const std::string& what) {
  const RecomputeRun none = run(c, Recompute::none, frozen), blocks = run(c, Recompute::blocks, frozen);
  ASSERT_GT(none.loss.tokens(), 0);
  EXPECT_EQ(blocks.loss.tokens(), none.loss.tokens());
  EXPECT_EQ(blocks.loss.loss_sum(), none.loss.loss_sum()) << what;  // bit for bit
  VlmModel names(c, Device::cpu());
  size_t i = 0, nonzero = 0;
  for (const auto& p : names.params().all()) {
    EXPECT_TRUE(bitwise_equal(blocks.grads[i], none.grads[i])) << what << ": " << p.name;
    for (int64_t k = 0; k < none.grads[i].numel(); ++k)
      if (none.grads[i].data<float>()[k] != 0.f) {
        ++nonzero;
        break;
      }
    ++i;
  }
  EXPECT_GT(nonzero, 10u) << what << ": the comparison must see real gradients";
}

TEST(Recompute, BlocksGiveBitIdenticalLossAndGradientsTied) {
  expect_identical(tiny_config(true, 0), {}, "tied");
}

TEST(Recompute, BlocksGiveBitIdenticalLossAndGradientsUntiedMlpProjector) {
  expect_identical(tiny_config(false, 24), {}, "untied, qkv bias, MLP projector");
}

TEST(Recompute, BlocksGiveBitIdenticalGradientsWithFrozenParts) {
  expect_identical(tiny_config(true, 0), {"vision"}, "vision frozen");
  expect_identical(tiny_config(false, 0), {"text"}, "text frozen");
}

TEST(Recompute, ForwardOnlyPathsAreUnchanged) {
  const ModelConfig c = tiny_config(true, 0);
  VlmModel model(c, Device::cpu());
  model.init_weights(7);
  const VlmInputs in = make_inputs(c, 3);
  const StepLoss a = model.forward_loss(in);
  const Tensor rows = Tensor::from_vector(std::vector<int32_t>{5, 8, 20}, {3});
  const Tensor la = model.logits_at_rows(in, model.encode_images(in.images), rows);
  model.set_recompute(Recompute::blocks);
  EXPECT_EQ(model.recompute(), Recompute::blocks);
  EXPECT_EQ(model.forward_loss(in).loss_sum(), a.loss_sum());
  EXPECT_TRUE(bitwise_equal(model.logits_at_rows(in, model.encode_images(in.images), rows), la));
}

// Bytes the CPU allocator holds after `forward` ran (its saved state and output still alive) minus before.
template <class Forward>
uint64_t retained_bytes(Forward forward) {
  const uint64_t before = cpu_allocator().stats().bytes_in_use;
  const auto kept = forward();  // holds the saved state and the output
  const uint64_t after = cpu_allocator().stats().bytes_in_use;
  EXPECT_GE(after, before);
  return after - before;
}

TEST(Recompute, BlocksLowerTheActivationPeak) {
  ModelConfig c = tiny_config(false, 0);
  c.vision.layers = 6;
  c.text.layers = 6;
  const VlmInputs in = make_inputs(c, 3);
  // What the blocks of each part keep from the forward to the backward without recomputation, beyond their inputs
  // (kept either way): measured on the parts alone, so the bound below follows whatever the blocks save.
  auto vision_kept = [&](bool recompute) {
    return retained_bytes([&] {
      auto store = std::make_shared<ParameterStore>();
      auto part = std::make_shared<VisionTransformer>(*store, c.vision, Device::cpu());
      store->init_normal(7, c.init_std);
      part->set_recompute_blocks(recompute);
      auto saved = std::make_shared<VisionTransformer::Saved>();
      Tensor out = part->forward(in.images, *saved);
      return std::make_tuple(store, part, saved, out);
    });
  };
  auto text_kept = [&](bool recompute) {
    return retained_bytes([&] {
      auto store = std::make_shared<ParameterStore>();
      auto part = std::make_shared<TextDecoder>(*store, c.text, Device::cpu());
      store->init_normal(7, c.init_std);
      part->set_recompute_blocks(recompute);
      auto saved = std::make_shared<TextDecoder::Saved>();
      const Tensor x0 = testing::random_normal({in.tokens.numel(), c.text.hidden}, 5);
      Tensor out = part->forward(x0, SeqInfo{in.cu_seqlens, in.max_seqlen, in.positions}, *saved);
      return std::make_tuple(store, part, saved, out, x0);
    });
  };
  const uint64_t vision_all = vision_kept(false), vision_inputs = vision_kept(true);
  const uint64_t text_all = text_kept(false), text_inputs = text_kept(true);
  ASSERT_GT(vision_all, vision_inputs);
  ASSERT_GT(text_all, text_inputs);
  const uint64_t vision_block = (vision_all - vision_inputs) / static_cast<uint64_t>(c.vision.layers);
  const uint64_t text_block = (text_all - text_inputs) / static_cast<uint64_t>(c.text.layers);

  const RecomputeRun none = run(c, Recompute::none), blocks = run(c, Recompute::blocks);
  EXPECT_EQ(blocks.loss.loss_sum(), none.loss.loss_sum());
  // The forward keeps none of a block's activations; the backward holds one recomputed block at a time. So the
  // step's peak drops by at least the activations of all but one block of each part.
  const uint64_t expected_drop = (c.vision.layers - 1) * vision_block + (c.text.layers - 1) * text_block;
  ASSERT_GT(none.activation_peak, blocks.activation_peak);
  EXPECT_GE(none.activation_peak - blocks.activation_peak, expected_drop)
      << "peak " << none.activation_peak << " -> " << blocks.activation_peak << " bytes; a vision block keeps "
      << vision_block << ", a text block " << text_block;
}

TEST(Recompute, NamesParse) {
  EXPECT_EQ(*parse_recompute("none"), Recompute::none);
  EXPECT_EQ(*parse_recompute("blocks"), Recompute::blocks);
  EXPECT_STREQ(recompute_name(Recompute::blocks), "blocks");
  for (const char* bad : {"", "Blocks", "block", "all", "none "}) {
    auto r = parse_recompute(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("is not one of none, blocks"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace vlm
