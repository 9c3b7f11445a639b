// AdamW on a parameter store (clipping, frozen params, lr scales, state save/load) and the LR schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "kernels/ops.h"

#include "testing/test_util.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

namespace vlm {
namespace {

TEST(LrSchedule, WarmupThenCosine) {
  EXPECT_FLOAT_EQ(lr_at_step(1, 100, 10, 1.f, 0.1f), 0.1f);
  EXPECT_FLOAT_EQ(lr_at_step(10, 100, 10, 1.f, 0.1f), 1.f);
  EXPECT_NEAR(lr_at_step(55, 100, 10, 1.f, 0.1f), 0.55f, 1e-6f);  // half-way: (1 + 0.1) / 2
  EXPECT_NEAR(lr_at_step(100, 100, 10, 1.f, 0.1f), 0.1f, 1e-6f);
  EXPECT_FLOAT_EQ(lr_at_step(5, 3, 0, 2.f, 0.f), 0.f);              // past the end: the floor
  EXPECT_FLOAT_EQ(lr_at_step(1, 1, 0, 2.f, 0.5f), 1.f);
}

struct Store {
  ParameterStore s;
  Param* a;
  Param* b;
  Store() {
    a = s.add("a.weight", ParamGroup::vision, {4}, true, Device::cpu());
    b = s.add("b.weight", ParamGroup::text, {3}, true, Device::cpu());
    for (int i = 0; i < 4; ++i) a->value.data<float>()[i] = 1.f, a->grad.data<float>()[i] = 3.f;
    for (int i = 0; i < 3; ++i) b->value.data<float>()[i] = 1.f, b->grad.data<float>()[i] = 4.f;
  }
};

TEST(AdamW, ClipsTheGlobalNormAndRespectsScalesAndFreezing) {
  Store st;
  ops::AdamWSettings c;
  c.weight_decay = 0;
  c.grad_clip = 1.f;
  const LrScales lr_scale = {{ParamGroup::text, 0.5f}};
  AdamW opt(st.s, c, lr_scale);
  EXPECT_NEAR(opt.grad_norm(), std::sqrt(4 * 9.0 + 3 * 16.0), 1e-5);
  opt.step(0.1f);
  // First Adam step moves every element by ~lr (m_hat / sqrt(v_hat) = sign(g)), whatever the clip factor.
  EXPECT_NEAR(st.a->value.data<float>()[0], 1.f - 0.1f, 1e-4);
  EXPECT_NEAR(st.b->value.data<float>()[0], 1.f - 0.05f, 1e-4);
  EXPECT_EQ(opt.steps_taken(), 1);

  Store frozen;
  frozen.b->trainable = false;
  AdamW opt2(frozen.s, c, lr_scale);
  opt2.step(0.1f);
  EXPECT_FLOAT_EQ(frozen.b->value.data<float>()[0], 1.f);
}

// A store of several parts and decay settings with random values and gradients, the same for every seed.
ParameterStore random_store(uint64_t seed) {
  ParameterStore s;
  s.add("v.weight", ParamGroup::vision, {37, 5}, true, Device::cpu());
  s.add("v.norm.weight", ParamGroup::vision, {5}, false, Device::cpu());
  s.add("p.weight", ParamGroup::projector, {6, 7}, true, Device::cpu());
  s.add("t.weight", ParamGroup::text, {300}, true, Device::cpu());
  s.add("t.bias", ParamGroup::text, {11}, false, Device::cpu());
  uint64_t i = 0;
  for (auto& p : s.all()) {
    p.value.copy_from(testing::random_normal(p.value.shape(), seed + i++));
    p.grad.copy_from(testing::random_normal(p.grad.shape(), seed + 100 + i));
  }
  return s;
}

TEST(AdamW, MultiTensorStepEqualsOneStepPerTensorBitForBit) {
  ParameterStore fused = random_store(5), single = random_store(5);
  ops::AdamWSettings c;
  c.weight_decay = 0.1f;
  c.grad_clip = 0.5f;  // active: the norm of these gradients is far above it
  const LrScales lr_scale = {{ParamGroup::vision, 4.f}, {ParamGroup::projector, 0.f}};
  AdamW opt(fused, c, lr_scale);
  // The reference: one single-tensor update per parameter with the same settings, clipped on the host.
  std::vector<Tensor> m, v;
  for (auto& p : single.all()) {
    m.push_back(Tensor::zeros(p.value.shape(), DType::f32));
    v.push_back(Tensor::zeros(p.value.shape(), DType::f32));
  }
  for (int64_t step = 1; step <= 3; ++step) {
    const float lr = 0.01f * static_cast<float>(step);
    const double norm = opt.step(lr).value();
    std::vector<Tensor> grads;
    for (auto& p : single.all()) grads.push_back(p.grad);
    const double ref_norm = std::sqrt(ops::sum_of_squares(grads));
    EXPECT_EQ(norm, ref_norm);
    size_t i = 0;
    for (auto& p : single.all()) {
      const float scale = lr_scale.count(p.group) ? lr_scale.at(p.group) : 1.f;
      ops::AdamWSettings s = c;
      s.lr = lr * scale;
      s.weight_decay = p.decay ? c.weight_decay : 0.f;
      const auto clip = static_cast<float>(c.grad_clip / (ref_norm + 1e-6));
      if (scale != 0.f) ops::adamw_step(p.value, p.grad, m[i], v[i], s, step, clip);
      ++i;
    }
  }
  for (auto& p : single.all()) {
    const Param* f = fused.find(p.name);
    ASSERT_NE(f, nullptr);
    EXPECT_TRUE(testing::all_close(f->value, p.value, 0, 0)) << p.name;
  }
  EXPECT_TRUE(testing::all_close(fused.find("p.weight")->value, random_store(5).find("p.weight")->value, 0, 0))
      << "an lr scale of 0 leaves the part unchanged";
  EXPECT_EQ(opt.state_bytes(), 2u * 4u * static_cast<uint64_t>(fused.numel(true)));
}

TEST(AdamW, RefreshesTheBf16ComputeCopies) {
  ParameterStore s = random_store(9);
  for (const auto& p : s.all()) EXPECT_FALSE(p.compute.defined()) << "fp32 mode has no compute copies";
  s.set_compute_dtype(DType::bf16);  // the copies are plain storage here: only cast and AdamW touch them on the CPU
  auto matches_master = [&](const Param& p) {
    Tensor expected = p.value.to(DType::bf16);
    return std::equal(static_cast<const uint16_t*>(expected.raw_data()),
                      static_cast<const uint16_t*>(expected.raw_data()) + expected.numel(),
                      static_cast<const uint16_t*>(p.compute.raw_data()));
  };
  for (const auto& p : s.all()) {
    ASSERT_TRUE(p.compute.defined());
    EXPECT_EQ(p.compute.dtype(), DType::bf16);
    EXPECT_EQ(&p.weight(), &p.compute);
    EXPECT_TRUE(matches_master(p)) << p.name << " after set_compute_dtype";
  }
  AdamW opt(s, ops::AdamWSettings{}, {{ParamGroup::text, 0.f}});
  opt.step(0.05f);
  opt.step(0.05f);
  for (const auto& p : s.all()) EXPECT_TRUE(matches_master(p)) << p.name << " after two steps";
  // Writing the masters directly needs sync_compute(), which restores the match.
  Param* t = s.find("t.weight");
  t->value.copy_from(testing::random_normal(t->value.shape(), 77));
  EXPECT_FALSE(matches_master(*t));
  s.sync_compute();
  EXPECT_TRUE(matches_master(*t));
  // Back to fp32: the copies are dropped and the ops read the masters.
  s.set_compute_dtype(DType::f32);
  EXPECT_FALSE(t->compute.defined());
  EXPECT_EQ(&t->weight(), &t->value);
}

TEST(AdamW, StateRoundTripsThroughSafetensors) {
  Store x, y;
  const ops::AdamWSettings c;
  AdamW ox(x.s, c), oy(y.s, c);
  ox.step(0.01f);
  ox.step(0.01f);
  const std::string dir = testing::scratch_dir("adamw");
  ASSERT_TRUE(ox.save(dir + "/opt.safetensors").ok());
  ASSERT_TRUE(oy.load(dir + "/opt.safetensors").ok());
  EXPECT_EQ(oy.steps_taken(), 2);
  // Same state + same params + same grads -> same next step.
  y.a->value.copy_from(x.a->value);
  y.b->value.copy_from(x.b->value);
  ox.step(0.01f);
  oy.step(0.01f);
  EXPECT_TRUE(testing::all_close(y.a->value, x.a->value, 0, 0));
  EXPECT_TRUE(testing::all_close(y.b->value, x.b->value, 0, 0));
  // A store with other parameters refuses the file.
  ParameterStore other;
  other.add("zzz.weight", ParamGroup::text, {2}, true, Device::cpu());
  AdamW oz(other, c);
  Status s = oz.load(dir + "/opt.safetensors");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("zzz.weight"), std::string::npos);
}

TEST(Checkpoint, RotationAndTemporaryFoldersAreIgnored) {
  const std::string dir = testing::scratch_dir("ckpts");
  CheckpointManager m(dir, 2);
  for (int64_t step : {10, 20, 30}) {
    ASSERT_TRUE(m.save(step, [&](const std::string& d) {
                   return write_file_atomic(d + "/x.txt", "x", 1);
                 }).ok());
  }
  auto list = m.list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].step, 20);
  EXPECT_EQ(m.latest()->step, 30);
  // A torn checkpoint (crash while writing) is never picked.
  std::filesystem::create_directories(dir + "/step_00000040.tmp");
  EXPECT_EQ(m.latest()->step, 30);
  // A failing writer leaves the previous checkpoint as the latest.
  Status s = m.save(50, [](const std::string&) { return io_error("disk full"); });
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("disk full"), std::string::npos);
  EXPECT_EQ(m.latest()->step, 30);
}

}  // namespace
}  // namespace vlm
