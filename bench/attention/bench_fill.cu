// Device-side random fill for the attention benchmark (hash-based normal-ish values; inputs of 64 MB each would take
// seconds to generate on the host).
#include <cuda_bf16.h>

#include <cstdint>

#include "bench/attention/bench_fill.h"
#include "core/cuda_check.h"

namespace vlm::bench {

namespace {

__device__ uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// Sum of four uniforms, centred and scaled to unit variance (Irwin-Hall): close enough to N(0, 1) for timing.
__global__ void fill_kernel(__nv_bfloat16* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (int j = 0; j < 4; ++j) s += mix(seed * 0x9e3779b97f4a7c15ull + 4 * i + j) * (1.f / 4294967296.f);
    p[i] = __float2bfloat16((s - 2.f) * 1.7320508f);
  }
}

}  // namespace

void fill_random_bf16(void* data, int64_t n, uint64_t seed) {
  fill_kernel<<<1024, 256>>>(static_cast<__nv_bfloat16*>(data), n, seed);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::bench
