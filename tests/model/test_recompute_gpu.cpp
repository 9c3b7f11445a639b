// Per-block activation recomputation on the GPU (label gpu; skipped without a device), fp32 and bf16: the loss and
// every parameter gradient of forward_backward are bit-identical with and without recomputation (expected: with
// ops::set_attention_deterministic(true), as train.deterministic sets it, the CUDA ops are deterministic, with fixed
// reduction orders, no float atomics and cuBLASLt algorithms cached per shape, and recomputation repeats the same
// kernels on the same block inputs), and the caching allocator's peak over the step drops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/ops.h"
#include "model/vlm.h"
#include "model_fixture.h"
#include "testing/attention_determinism.h"
#include "testing/test_util.h"
#include "train/memory_report.h"

namespace vlm {
namespace {

using testing::make_inputs;
using testing::tiny_config;

#define SKIP_WITHOUT_CUDA() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

VlmInputs on_device(const VlmInputs& in, Device d) {
  VlmInputs out = in;
  for (Tensor* t : {&out.images, &out.tokens, &out.positions, &out.cu_seqlens, &out.image_rows, &out.loss_rows,
                    &out.loss_targets})
    *t = t->to(d);
  return out;
}

struct GpuRun {
  StepLoss loss;
  std::vector<Tensor> grads;  // CPU copies, in parameter order
  uint64_t activation_peak = 0;
};

GpuRun run(const ModelConfig& c, DType dtype, Recompute recompute) {
  const Device dev = Device::cuda(0);
  VlmModel model(c, dev, dtype);
  model.init_weights(7);
  model.set_recompute(recompute);
  const VlmInputs in = on_device(make_inputs(c, 3), dev);
  model.params().zero_grads();
  model.forward_backward(in, 1.f);  // warm-up: cuBLASLt algorithm choices and workspaces exist before measuring
  model.params().zero_grads();
  EXPECT_TRUE(ops::check_index_errors(dev).ok());
  StepMemoryMeter meter(dev);
  meter.begin();
  GpuRun r;
  r.loss = model.forward_backward(in, 1.f / 3);
  EXPECT_TRUE(ops::check_index_errors(dev).ok());  // synchronizes before reading the allocator's peak
  r.activation_peak = meter.end(model.params(), 0, dtype_name(dtype)).activation_peak_bytes;
  for (const auto& p : model.params().all()) r.grads.push_back(p.grad.to(Device::cpu()));
  return r;
}

void expect_identical(const ModelConfig& c, DType dtype) {
  const testing::AttentionDeterminismScope deterministic(true);
  const GpuRun none = run(c, dtype, Recompute::none), blocks = run(c, dtype, Recompute::blocks);
  const std::string what = dtype_name(dtype);
  ASSERT_GT(none.loss.tokens(), 0);
  ASSERT_TRUE(std::isfinite(none.loss.loss_sum())) << what;
  EXPECT_EQ(blocks.loss.loss_sum(), none.loss.loss_sum()) << what;
  VlmModel names(c, Device::cpu());
  size_t i = 0;
  for (const auto& p : names.params().all()) {
    const Tensor& a = none.grads[i];
    const Tensor& b = blocks.grads[i];
    ++i;
    ASSERT_EQ(a.shape(), b.shape()) << p.name;
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << what << ": " << p.name;
  }
  // Six blocks per part: all but one no longer keep their activations through the step.
  EXPECT_LT(blocks.activation_peak, none.activation_peak) << what;
}

ModelConfig deeper(bool tied, int projector_mlp) {
  ModelConfig c = tiny_config(tied, projector_mlp);
  c.vision.layers = 6;
  c.text.layers = 6;
  return c;
}

TEST(RecomputeGpu, Fp32BitIdenticalGradientsAndLowerPeak) {
  SKIP_WITHOUT_CUDA();
  expect_identical(deeper(true, 0), DType::f32);
}

TEST(RecomputeGpu, Bf16BitIdenticalGradientsAndLowerPeak) {
  SKIP_WITHOUT_CUDA();
  expect_identical(deeper(true, 0), DType::bf16);
  expect_identical(deeper(false, 24), DType::bf16);
}

}  // namespace
}  // namespace vlm
