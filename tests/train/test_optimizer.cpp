// AdamW on a parameter store (clipping, frozen params, lr scales, state save/load) and the LR schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

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
  AdamWConfig c;
  c.weight_decay = 0;
  c.grad_clip = 1.f;
  c.lr_scale = {{ParamGroup::text, 0.5f}};
  AdamW opt(st.s, c);
  EXPECT_NEAR(opt.grad_norm(), std::sqrt(4 * 9.0 + 3 * 16.0), 1e-5);
  opt.step(0.1f);
  // First Adam step moves every element by ~lr (m_hat / sqrt(v_hat) = sign(g)), whatever the clip factor.
  EXPECT_NEAR(st.a->value.data<float>()[0], 1.f - 0.1f, 1e-4);
  EXPECT_NEAR(st.b->value.data<float>()[0], 1.f - 0.05f, 1e-4);
  EXPECT_EQ(opt.steps_taken(), 1);

  Store frozen;
  frozen.b->trainable = false;
  AdamW opt2(frozen.s, c);
  opt2.step(0.1f);
  EXPECT_FLOAT_EQ(frozen.b->value.data<float>()[0], 1.f);
}

TEST(AdamW, StateRoundTripsThroughSafetensors) {
  Store x, y;
  AdamWConfig c;
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
