// The per-op profile (kernels/op_profile.h): keys carry the scope, the op and the shape tag; calls are counted once
// per op (the outermost), nothing is recorded outside a profile, and a restarted profile starts empty.
#include <gtest/gtest.h>

#include <map>

#include "kernels/op_profile.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

using ops::profile::OpTime;

std::map<std::string, OpTime> by_key(const std::vector<OpTime>& times) {
  std::map<std::string, OpTime> m;
  for (const OpTime& t : times) m[t.key] = t;
  return m;
}

TEST(OpProfile, KeysScopesTagsAndCounts) {
  Tensor x = Tensor::zeros({8, 3}, DType::f32), w = Tensor::zeros({4, 3}, DType::f32);
  Tensor y = Tensor::zeros({8, 4}, DType::f32);
  Tensor none;
  ops::linear_forward(y, x, w, none);  // before the profile: not recorded
  ops::profile::profile_begin();
  {
    ops::profile::ProfileScope outer("vision");
    ops::linear_forward(y, x, w, none);
    {
      ops::profile::ProfileScope inner("mlp");
      ops::linear_forward(y, x, w, none);
      ops::linear_forward(y, x, w, none);
    }
    ops::fill(y, 1.f);
  }
  ops::scale(y, 2.f);
  const auto times = ops::profile::profile_end();
  const auto m = by_key(times);
  ASSERT_EQ(m.size(), 4u) << "keys: " << times.size();
  ASSERT_TRUE(m.count("vision/linear_forward 8x4x3"));
  EXPECT_EQ(m.at("vision/linear_forward 8x4x3").calls, 1);
  ASSERT_TRUE(m.count("vision/mlp/linear_forward 8x4x3"));
  EXPECT_EQ(m.at("vision/mlp/linear_forward 8x4x3").calls, 2);
  EXPECT_EQ(m.at("vision/mlp/linear_forward 8x4x3").op, "linear_forward");
  ASSERT_TRUE(m.count("vision/fill"));
  ASSERT_TRUE(m.count("scale"));
  for (const OpTime& t : times) EXPECT_GE(t.ms, 0.0) << t.key;
  for (size_t i = 1; i < times.size(); ++i) EXPECT_GE(times[i - 1].ms, times[i].ms) << "sorted, largest first";
  EXPECT_FLOAT_EQ(y.data<float>()[0], 2.f) << "the ops still ran";

  ops::linear_forward(y, x, w, none);  // after the profile: not recorded
  ops::profile::profile_begin();
  EXPECT_TRUE(ops::profile::profile_end().empty()) << "a new profile starts empty";
}

TEST(OpProfile, NestedOpCountsOnce) {
  // An op that calls other ops (as a composition would) is one call under its own name.
  Tensor y = Tensor::zeros({32}, DType::f32);
  ops::profile::profile_begin();
  {
    ops::profile::OpRange outer("composite", Device::cpu());
    ops::fill(y, 1.f);
    ops::scale(y, 3.f);
  }
  ops::fill(y, 2.f);
  const auto m = by_key(ops::profile::profile_end());
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m.at("composite").calls, 1);
  EXPECT_EQ(m.at("fill").calls, 1);
}

TEST(OpProfile, LmHeadOpsCarryItsScope) {
  Tensor hidden = Tensor::zeros({4, 8}, DType::f32), w = Tensor::zeros({16, 8}, DType::f32);
  Tensor losses = Tensor::zeros({4}, DType::f32);
  Tensor targets = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4}, {4});
  Tensor dhidden = Tensor::zeros({4, 8}, DType::f32), dw = Tensor::zeros({16, 8}, DType::f32);
  ops::profile::profile_begin();
  ops::lm_head_cross_entropy(losses, dhidden, dw, hidden, w, targets, 1.f, -100, 2);
  const auto times = ops::profile::profile_end();
  ASSERT_FALSE(times.empty());
  for (const OpTime& t : times) EXPECT_EQ(t.key.rfind("lm_head/", 0), 0u) << t.key;
}

}  // namespace
}  // namespace vlm::testing
