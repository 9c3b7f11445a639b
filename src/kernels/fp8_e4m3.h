// fp8 E4M3 (the OCP "E4M3FN" format: 1 sign, 4 exponent bits with bias 7, 3 mantissa bits, no infinities, NaN =
// S.1111.111, largest finite 448) and its block scaling, one definition for the CPU reference (cpu/quant.cpp) and the
// CUDA kernels (cuda/quant.cu), so both produce the same bytes. Every step is exact or one IEEE-rounded f32
// operation (no contraction): powers of two through ldexpf/frexpf, rounding through rintf (round half to even).
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define VLM_FP8_HD __host__ __device__ inline
#else
#define VLM_FP8_HD inline
#endif

namespace vlm::ops::fp8 {

inline constexpr int kBlock = 128;       // elements sharing one f32 scale
inline constexpr float kMax = 448.f;     // largest finite E4M3 value
inline constexpr uint8_t kNaN = 0x7F;

// The nearest E4M3 code to f (ties to even), saturating at +-448; NaN -> kNaN.
VLM_FP8_HD uint8_t encode(float f) {
  const uint8_t sign = f < 0.f || (f == 0.f && std::signbit(f)) ? 0x80 : 0;
  const float a = fabsf(f);
  if (a != a) return kNaN;
  if (a >= kMax) return static_cast<uint8_t>(sign | 0x7E);
  if (a < 0.015625f) {  // below 2^-6: subnormals, steps of 2^-9 (8 of them reach the smallest normal)
    return static_cast<uint8_t>(sign | static_cast<int>(rintf(ldexpf(a, 9))));
  }
  int e2 = 0;
  const float fr = frexpf(a, &e2);  // a = fr * 2^e2, fr in [0.5, 1)
  int e = e2 - 1;                   // a = (2 fr) 2^e, 2 fr in [1, 2)
  int m = static_cast<int>(rintf((ldexpf(fr, 1) - 1.f) * 8.f));
  if (m == 8) {
    m = 0;
    ++e;
  }
  return static_cast<uint8_t>(sign | ((e + 7) << 3) | m);
}

VLM_FP8_HD float decode(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return NAN;
  const float v = e == 0 ? ldexpf(static_cast<float>(m), -9) : ldexpf(static_cast<float>(8 + m), e - 10);
  return (c & 0x80) ? -v : v;
}

// A block's scale and the factor its elements are multiplied by before encode(): amax / 448 and 448 / amax (both 0
// for an all-zero block, whose codes are then all 0).
VLM_FP8_HD float block_scale(float amax) { return amax > 0.f ? amax / kMax : 0.f; }
VLM_FP8_HD float block_inverse(float amax) { return amax > 0.f ? kMax / amax : 0.f; }

}  // namespace vlm::ops::fp8
