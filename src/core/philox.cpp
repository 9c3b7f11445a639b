// Philox4x32-10 with the published round constants.
#include "core/philox.h"

#include <cmath>

namespace vlm {
namespace {
constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

Philox::Philox(uint64_t seed, uint64_t subsequence) { state_ = {seed, subsequence, 0}; }
Philox::Philox(const PhiloxState& state) : state_(state) {}

uint32_t Philox::next_u32() {
  // Counter = (block index within the subsequence, subsequence); key = seed. Word (offset % 4) of block offset/4.
  const uint64_t block = state_.offset / 4;
  auto r = philox4x32_10({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                          static_cast<uint32_t>(state_.subsequence), static_cast<uint32_t>(state_.subsequence >> 32)},
                         {static_cast<uint32_t>(state_.seed), static_cast<uint32_t>(state_.seed >> 32)});
  return r[static_cast<size_t>(state_.offset++ % 4)];
}

uint64_t Philox::next_u64() {
  uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

float Philox::uniform() { return static_cast<float>(next_u32() >> 8) * (1.0f / 16777216.0f); }

float Philox::normal() {
  float u1 = uniform(), u2 = uniform();
  if (u1 < 1e-12f) u1 = 1e-12f;
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795864f * u2);
}

uint64_t Philox::uniform_int(uint64_t n) {
  if (n <= 1) return 0;
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // reject the biased tail
  uint64_t x;
  do {
    x = next_u64();
  } while (x >= limit);
  return x % n;
}

}  // namespace vlm
