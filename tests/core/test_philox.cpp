// Philox4x32-10 against the Random123 known-answer vectors, plus determinism and distribution sanity.
#include <gtest/gtest.h>

#include <cmath>

#include "core/philox.h"

namespace vlm {
namespace {

TEST(Philox, KnownAnswerVectors) {
  auto zero = philox4x32_10({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(zero, (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  auto ones = philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(ones, (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  auto pi = philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u});
  EXPECT_EQ(pi, (std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, StateRestoresTheStream) {
  Philox a(42, 7);
  for (int i = 0; i < 13; ++i) a.next_u32();
  Philox b(a.state());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u32(), b.next_u32());
}

TEST(Philox, SubsequencesDiffer) {
  Philox a(1, 0), b(1, 1);
  int same = 0;
  for (int i = 0; i < 64; ++i) same += a.next_u32() == b.next_u32();
  EXPECT_LT(same, 2);
}

TEST(Philox, UniformAndNormalMoments) {
  Philox r(123);
  double s = 0, s2 = 0, n = 200000;
  for (int i = 0; i < n; ++i) {
    float u = r.uniform();
    ASSERT_TRUE(u >= 0.f && u < 1.f);
    s += u;
  }
  EXPECT_NEAR(s / n, 0.5, 0.005);
  s = 0;
  for (int i = 0; i < n; ++i) {
    double x = r.normal();
    s += x;
    s2 += x * x;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.02);
  for (int i = 0; i < 1000; ++i) EXPECT_LT(r.uniform_int(7), 7u);
}

}  // namespace
}  // namespace vlm
