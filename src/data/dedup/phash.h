// Perceptual hash (pHash) of an image: 64 bits that stay nearly equal under re-encoding, resizing, light crops
// and small colour changes, compared by Hamming distance.
//
// Exact recipe (fixed: hashes written to signature files must stay comparable):
//  1. resize the RGB image to 32 x 32 with our Pillow-compatible antialiased bilinear resize (resize before the
//     gray conversion: both are linear up to 8-bit rounding, and resizing first touches 3 x 1024 values instead of
//     converting every source pixel);
//  2. luma L = (19595 R + 38470 G + 7471 B + 32768) >> 16 (Pillow's "L" conversion), as doubles;
//  3. 2-D DCT-II of the 32 x 32 block, unnormalised: F(u, v) = sum_y sum_x L(y, x) cos(pi (2y+1) u / 64)
//     cos(pi (2x+1) v / 64);
//  4. keep the 8 x 8 lowest frequencies EXCLUDING row 0 and column 0 (u, v in 1..8, as phash.org does): the DC
//     term (mean brightness) dwarfs the rest and the first row/column carry mostly global gradients; every kept
//     coefficient has the same DCT scale factor, so no normalisation is needed. Coefficients with |F| < 1e-6 are
//     set to 0 (float noise on flat images);
//  5. median m of the 64 values (mean of the 32nd and 33rd smallest); bit (u-1)*8 + (v-1) is set when F(u, v) > m.
// A flat image hashes to 0. Distances measured on 400 procedural photo-like images (tests/data/dedup): JPEG
// re-encodes (q92 -> q40), 0.6x / 2x resizes and +20 brightness 0-10 bits (mostly 0-4); 2% crops per side 0-14
// (96% <= 10); distinct images 12-44 (99.99% of pairs >= 16, median ~32).
// Thread-safe (pure functions).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "data/image/image.h"

namespace vlm {

constexpr int kPhashSize = 32;     // the DCT block side
constexpr int kPhashLowFreq = 8;   // kept frequencies per axis (1..8)
// Decode hint for pHash: JPEGs may be DCT-scaled down to no less than this side (see ImageDecodeOptions).
constexpr int kPhashDecodeMinSide = 64;

// The 64 kept coefficients F(u, v), u, v in 1..8, at index (u-1)*8 + (v-1), of a 32 x 32 luma block
// (`luma[y * 32 + x]`).
std::array<double, 64> phash_low_frequencies(const double* luma);
// Bits from the 64 coefficients (steps 4-5 above, flush-to-zero included).
uint64_t phash_bits(std::array<double, 64> coefficients);
// The 32 x 32 luma block of steps 1-2.
std::array<double, kPhashSize * kPhashSize> phash_luma(const Image& image);

uint64_t perceptual_hash(const Image& image);

// Decodes (DCT-scaled for large JPEGs, see kPhashDecodeMinSide) and hashes encoded image bytes.
Expected<uint64_t> perceptual_hash_encoded(const uint8_t* data, size_t size, uint64_t max_pixels = 64ull << 20);

inline int hamming_distance(uint64_t a, uint64_t b) { return std::popcount(a ^ b); }

}  // namespace vlm
