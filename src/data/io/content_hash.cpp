// MurmurHash3_x64_128 (see content_hash.h).
#include "data/io/content_hash.h"

#include <cstdio>
#include <cstring>

namespace vlm {
namespace {

constexpr uint64_t kC1 = 0x87c37b91114253d5ull;
constexpr uint64_t kC2 = 0x4cf5ad432745937full;

inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Little-endian 64-bit load from any alignment.
inline uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline uint64_t mix_k1(uint64_t k1) { return rotl64(k1 * kC1, 31) * kC2; }
inline uint64_t mix_k2(uint64_t k2) { return rotl64(k2 * kC2, 33) * kC1; }

}  // namespace

uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

ImageContentHash murmur3_x64_128(const void* data, size_t size, uint32_t seed) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  const size_t n_blocks = size / 16;
  uint64_t h1 = seed, h2 = seed;

  for (size_t i = 0; i < n_blocks; ++i) {
    const uint8_t* block = bytes + i * 16;
    h1 ^= mix_k1(load_le64(block));
    h1 = rotl64(h1, 27) + h2;
    h1 = h1 * 5 + 0x52dce729;
    h2 ^= mix_k2(load_le64(block + 8));
    h2 = rotl64(h2, 31) + h1;
    h2 = h2 * 5 + 0x38495ab5;
  }

  // The last size % 16 bytes: bytes 8..14 feed the second lane, bytes 0..7 the first.
  const uint8_t* tail = bytes + n_blocks * 16;
  const size_t rest = size & 15;
  uint64_t k1 = 0, k2 = 0;
  for (size_t i = rest; i > 8; --i) k2 |= static_cast<uint64_t>(tail[i - 1]) << ((i - 9) * 8);
  for (size_t i = rest < 8 ? rest : 8; i > 0; --i) k1 |= static_cast<uint64_t>(tail[i - 1]) << ((i - 1) * 8);
  if (rest > 8) h2 ^= mix_k2(k2);
  if (rest > 0) h1 ^= mix_k1(k1);

  h1 ^= static_cast<uint64_t>(size);
  h2 ^= static_cast<uint64_t>(size);
  h1 += h2;
  h2 += h1;
  h1 = fmix64(h1);
  h2 = fmix64(h2);
  h1 += h2;
  h2 += h1;
  return {h1, h2};
}

std::string ImageContentHash::to_hex() const {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

}  // namespace vlm
