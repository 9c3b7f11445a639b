// The quant family (fp8 E4M3 with one f32 scale per block of 128) on the CPU: every finite E4M3 value encodes to
// itself and the midpoints between neighbours round to the even code; saturation at 448; the block round trip keeps
// the error bound of ops.h on random inputs of very different magnitudes per block (and is not exact, so the test
// sees the quantization); all-zero and partial last blocks; the boundary's checks.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/fp8_e4m3.h"
#include "kernels/ops.h"
#include "testing/test_util.h"

namespace vlm::testing {
namespace {

TEST(Fp8E4m3, EveryCodeRoundTripsAndTiesGoToEven) {
  for (int c = 0; c < 256; ++c) {
    const float v = ops::fp8::decode(static_cast<uint8_t>(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    EXPECT_EQ(ops::fp8::encode(v), c) << "code " << c << " value " << v;
  }
  EXPECT_EQ(ops::fp8::decode(0x7E), 448.f);
  EXPECT_EQ(ops::fp8::decode(0x01), std::ldexp(1.f, -9));
  // Midpoints between positive neighbours k, k + 1 (below 448) round to the even code.
  for (int k = 0; k < 0x7E; ++k) {
    const float lo = ops::fp8::decode(static_cast<uint8_t>(k)), hi = ops::fp8::decode(static_cast<uint8_t>(k + 1));
    const float mid = (lo + hi) / 2;
    EXPECT_EQ(ops::fp8::encode(mid), k % 2 == 0 ? k : k + 1) << "between " << lo << " and " << hi;
    EXPECT_EQ(ops::fp8::encode(std::nextafter(mid, 0.f)), k);
    EXPECT_EQ(ops::fp8::encode(std::nextafter(mid, 1e9f)), k + 1);
  }
  EXPECT_EQ(ops::fp8::encode(1e6f), 0x7E);  // saturates
  EXPECT_EQ(ops::fp8::encode(-1e6f), 0xFE);
  EXPECT_EQ(ops::fp8::encode(NAN), ops::fp8::kNaN);
}

TEST(QuantizeFp8Blocks, RoundTripKeepsTheErrorBound) {
  for (int64_t n : {1, 127, 128, 129, 1000, 4099}) {
    Tensor x = random_normal({n}, static_cast<uint64_t>(n), 1.f);
    float* p = x.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] *= std::ldexp(1.f, static_cast<int>((i / 128) % 9) * 3 - 12);  // 2^-12..2^12
    if (n > 300) std::fill(p + 128, p + 256, 0.f);  // an all-zero block
    const int64_t blocks = ops::fp8_block_count(n);
    ASSERT_EQ(blocks, (n + 127) / 128);
    Tensor q = Tensor::empty({n}, DType::u8), scales = Tensor::empty({blocks}, DType::f32);
    ops::quantize_fp8_blocks(q, scales, x);
    Tensor back = Tensor::empty({n}, DType::f32);
    ops::dequantize_fp8_blocks(back, q, scales);
    double worst_rel = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = p[i], got = back.data<float>()[i], scale = scales.data<float>()[i / 128];
      ASSERT_FALSE(std::isnan(got)) << i;
      const double bound = std::ldexp(1.0, -4) * std::fabs(want) + std::ldexp(1.0, -10) * scale +
                           std::ldexp(1.0, -21) * std::fabs(want);
      ASSERT_LE(std::fabs(got - want), bound) << "n " << n << " element " << i << ": " << got << " for " << want;
      if (std::fabs(want) > 8 * scale) worst_rel = std::max(worst_rel, std::fabs(got - want) / std::fabs(want));
    }
    for (int64_t b = 0; b < blocks; ++b) {  // scale = amax / 448: the block's largest element maps to 448
      float amax = 0;
      for (int64_t i = b * 128; i < std::min<int64_t>(n, b * 128 + 128); ++i) amax = std::max(amax, std::fabs(p[i]));
      EXPECT_EQ(scales.data<float>()[b], amax / 448.f) << b;
    }
    if (n >= 128) {
      EXPECT_GT(worst_rel, std::ldexp(1.0, -6)) << "no quantization error seen";
    }
    if (n > 300) {
      for (int64_t i = 128; i < 256; ++i) EXPECT_EQ(back.data<float>()[i], 0.f);
    }
  }
}

TEST(QuantizeFp8Blocks, BadShapesAndDtypesAreErrorsNamingTheOp) {
  Tensor x = Tensor::zeros({300}, DType::f32), q = Tensor::empty({300}, DType::u8);
  Tensor few = Tensor::empty({2}, DType::f32);
  EXPECT_DEATH(ops::quantize_fp8_blocks(q, few, x), "quantize_fp8_blocks: scales");
  Tensor q_f32 = Tensor::empty({300}, DType::f32), scales = Tensor::empty({3}, DType::f32);
  EXPECT_DEATH(ops::dequantize_fp8_blocks(x, q_f32, scales), "dequantize_fp8_blocks: q");
}

}  // namespace
}  // namespace vlm::testing
