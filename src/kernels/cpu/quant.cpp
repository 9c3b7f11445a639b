// The quant family's CPU reference: fp8 E4M3 with one f32 scale per block of 128 elements (kernels/fp8_e4m3.h).
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/fp8_e4m3.h"

namespace vlm::ops::cpu {

void quantize_fp8_blocks(uint8_t* q, float* scales, const float* x, int64_t n) {
  const int64_t blocks = (n + fp8::kBlock - 1) / fp8::kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMinWork)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * fp8::kBlock, hi = std::min<int64_t>(lo + fp8::kBlock, n);
    float amax = 0.f;
    for (int64_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float inv = fp8::block_inverse(amax);
    scales[b] = fp8::block_scale(amax);
    for (int64_t i = lo; i < hi; ++i) q[i] = fp8::encode(x[i] * inv);
  }
}

void dequantize_fp8_blocks(float* x, const uint8_t* q, const float* scales, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) x[i] = fp8::decode(q[i]) * scales[i / fp8::kBlock];
}

}  // namespace vlm::ops::cpu
