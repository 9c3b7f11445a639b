// Exact-duplicate hashing: a 128-bit content hash of a sample's encoded image bytes (MurmurHash3_x64_128, Austin
// Appleby's public-domain algorithm: two 64-bit lanes, 16-byte blocks, multiply-rotate mixing, fmix64
// finalization), written here from the algorithm's description and checked against its published vectors.
// Equal bytes give equal hashes on every platform (blocks are read little-endian). Not cryptographic: a hostile
// input can be built to collide, which for dedup only means one extra sample is dropped.
// The loader's online exact dedup calls content_hash() directly. Thread-safe (pure functions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vlm {

struct ImageContentHash {
  uint64_t lo = 0, hi = 0;  // MurmurHash3's h1 and h2

  bool operator==(const ImageContentHash&) const = default;
  auto operator<=>(const ImageContentHash&) const = default;
  std::string to_hex() const;  // 32 hex digits, hi then lo
};

// For unordered containers keyed by the hash (the hash is already uniform: lo is enough).
struct ImageContentHashHasher {
  size_t operator()(const ImageContentHash& h) const { return static_cast<size_t>(h.lo); }
};

// MurmurHash3_x64_128 of `size` bytes with a 32-bit seed, as the reference implementation computes it.
ImageContentHash murmur3_x64_128(const void* data, size_t size, uint32_t seed = 0);

// The exact-dedup hash of encoded image bytes (MurmurHash3_x64_128, seed 0).
inline ImageContentHash content_hash(const uint8_t* data, size_t size) { return murmur3_x64_128(data, size, 0); }
inline ImageContentHash content_hash(std::string_view bytes) { return murmur3_x64_128(bytes.data(), bytes.size(), 0); }

// MurmurHash3's 64-bit finalizer (a bijection with full avalanche); also used to derive independent hash values.
uint64_t fmix64(uint64_t k);

}  // namespace vlm
