// The Gumbel noise of ops::gumbel_argmax_rows, one definition for the CPU reference (cpu/loss.cpp) and the CUDA kernel
// (cuda/loss.cu): element v of a row with key k gets g = -log(-log(u)), u a uniform in (0, 1) hashed from (k, v), so
// a row's draw depends on its key alone (not on the batch, the thread count or the device) and argmax(x / T + g) is a
// sample of softmax(x / T) (the Gumbel-max trick).
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define VLM_GUMBEL_HD __host__ __device__ inline
#else
#define VLM_GUMBEL_HD inline
#endif

namespace vlm::ops::gumbel {

// SplitMix64's finalizer: a bijection of 64-bit words whose output bits each depend on every input bit.
VLM_GUMBEL_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A uniform in (0, 1) for element v of key k: 24 hashed bits, centred in their interval (never 0 or 1).
VLM_GUMBEL_HD float uniform(uint64_t key, int64_t v) {
  const uint64_t h = mix64(mix64(key) ^ (static_cast<uint64_t>(v) * 0x9e3779b97f4a7c15ull));
  return (static_cast<float>(h >> 40) + 0.5f) * (1.f / 16777216.f);
}

VLM_GUMBEL_HD float noise(uint64_t key, int64_t v) { return -logf(-logf(uniform(key, v))); }

}  // namespace vlm::ops::gumbel
