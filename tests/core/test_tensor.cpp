// Tensor, Shape, DType conversion and Status/Expected behaviour.
#include <gtest/gtest.h>

#include <cmath>

#include "core/device.h"
#include "core/tensor.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

TEST(Tensor, EmptyShapeStridesAndViews) {
  Tensor t = Tensor::zeros({2, 3, 4}, DType::f32);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.strides(), Shape({12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.dim(-1), 4);
  for (int64_t i = 0; i < 24; ++i) t.data<float>()[i] = static_cast<float>(i);
  Tensor v = t.view({6, -1});
  EXPECT_EQ(v.shape(), Shape({6, 4}));
  EXPECT_EQ(v.data<float>(), t.data<float>());  // shares storage
  Tensor s = v.slice(0, 2, 4);
  EXPECT_EQ(s.shape(), Shape({2, 4}));
  EXPECT_FLOAT_EQ(s.item_f32(0), 8.f);
  EXPECT_TRUE(s.is_contiguous());
  Tensor cols = v.slice(1, 1, 3);
  EXPECT_FALSE(cols.is_contiguous());
}

TEST(Tensor, CloneIsIndependent) {
  Tensor a = Tensor::full({3}, 1.5f);
  Tensor b = a.clone();
  b.data<float>()[0] = 7.f;
  EXPECT_FLOAT_EQ(a.item_f32(0), 1.5f);
  EXPECT_FLOAT_EQ(b.item_f32(0), 7.f);
}

TEST(Tensor, WrongDtypeAccessAborts) {
  Tensor a = Tensor::zeros({2}, DType::i32);
  EXPECT_DEATH(a.data<float>(), "accessed as f32");
}

TEST(Tensor, BadViewAborts) {
  Tensor a = Tensor::zeros({2, 3}, DType::f32);
  EXPECT_DEATH(a.view({4, 2}), "does not match");
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly half-way between two bf16 values: ties to even (down to 1.0).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  // 1 + 3*2^-8 is half-way between 1+2^-7 (odd) and 1+2^-6 (even): rounds up.
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_FLOAT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
}

TEST(DType, F16RoundTrip) {
  for (float v : {0.f, 1.f, -2.f, 0.5f, 65504.f, 6.103515625e-05f, 5.960464477539063e-08f}) {
    EXPECT_FLOAT_EQ(f16_to_f32(f32_to_f16(v)), v) << v;
  }
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
}

TEST(Tensor, DtypeConversion) {
  Tensor a = Tensor::from_vector<float>({1.f, -3.25f, 1e-3f}, {3});
  Tensor b = a.to(DType::bf16);
  EXPECT_EQ(b.dtype(), DType::bf16);
  Tensor c = b.to(DType::f32);
  EXPECT_TRUE(vlm::testing::all_close(c, a, 1e-2, 0));
}

TEST(Device, Parse) {
  EXPECT_TRUE(parse_device("cpu")->is_cpu());
  EXPECT_EQ(parse_device("cuda:3")->index, 3);
  EXPECT_FALSE(parse_device("tpu").ok());
  EXPECT_NE(parse_device("cuda:x").status().message().find("cuda:x"), std::string::npos);
}

Expected<int> half_of(int x) {
  if (x % 2) return invalid_argument("odd: " + std::to_string(x));
  return x / 2;
}
Status use_half(int x, int* out) {
  VLM_ASSIGN_OR_RETURN(*out, half_of(x));
  return Status();
}

TEST(Status, ExpectedPropagates) {
  int out = 0;
  EXPECT_TRUE(use_half(8, &out).ok());
  EXPECT_EQ(out, 4);
  Status s = use_half(3, &out);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_EQ(s.to_string(), "invalid_argument: odd: 3");
  EXPECT_EQ(s.with_context("ctx").message(), "ctx: odd: 3");
}

TEST(Allocator, CpuStatsTrackUse) {
  auto before = cpu_allocator().stats().bytes_in_use;
  {
    Tensor t = Tensor::empty({1000}, DType::f32);
    EXPECT_GE(cpu_allocator().stats().bytes_in_use, before + 4000);
  }
  EXPECT_EQ(cpu_allocator().stats().bytes_in_use, before);
}

}  // namespace
}  // namespace vlm
