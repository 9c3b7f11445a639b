// pHash: resize to 32 x 32, luma, low-frequency DCT-II, median threshold (see phash.h).
#include "data/dedup/phash.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "data/image/transforms.h"

namespace vlm {
namespace {

// cos(pi (2x+1) u / 64) for u in 1..8 (row u-1) and x in 0..31.
struct DctTable {
  double c[kPhashLowFreq][kPhashSize];
  DctTable() {
    for (int u = 1; u <= kPhashLowFreq; ++u)
      for (int x = 0; x < kPhashSize; ++x)
        c[u - 1][x] = std::cos(std::numbers::pi * (2 * x + 1) * u / (2.0 * kPhashSize));
  }
};

const DctTable& dct_table() {
  static const DctTable table;
  return table;
}

}  // namespace

std::array<double, 64> phash_low_frequencies(const double* luma) {
  const DctTable& t = dct_table();
  // Horizontal pass for the 8 kept horizontal frequencies v: row_f[y][v] = sum_x L(y, x) cos(.. v ..).
  double row_f[kPhashSize][kPhashLowFreq];
  for (int y = 0; y < kPhashSize; ++y)
    for (int v = 0; v < kPhashLowFreq; ++v) {
      double s = 0;
      for (int x = 0; x < kPhashSize; ++x) s += luma[y * kPhashSize + x] * t.c[v][x];
      row_f[y][v] = s;
    }
  // Vertical pass for the 8 kept vertical frequencies u.
  std::array<double, 64> out{};
  for (int u = 0; u < kPhashLowFreq; ++u)
    for (int v = 0; v < kPhashLowFreq; ++v) {
      double s = 0;
      for (int y = 0; y < kPhashSize; ++y) s += row_f[y][v] * t.c[u][y];
      out[u * kPhashLowFreq + v] = s;
    }
  return out;
}

uint64_t phash_bits(std::array<double, 64> coefficients) {
  for (double& c : coefficients)
    if (std::fabs(c) < 1e-6) c = 0.0;
  std::array<double, 64> sorted = coefficients;
  std::nth_element(sorted.begin(), sorted.begin() + 32, sorted.end());
  const double upper = sorted[32];
  const double lower = *std::max_element(sorted.begin(), sorted.begin() + 32);
  const double median = 0.5 * (lower + upper);
  uint64_t bits = 0;
  for (int i = 0; i < 64; ++i)
    if (coefficients[i] > median) bits |= uint64_t{1} << i;
  return bits;
}

std::array<double, kPhashSize * kPhashSize> phash_luma(const Image& image) {
  const Image small = resize_to(image, kPhashSize, kPhashSize, ResizeFilter::bilinear);
  std::array<double, kPhashSize * kPhashSize> luma{};
  for (int i = 0; i < kPhashSize * kPhashSize; ++i) {
    const uint8_t* p = small.rgb.data() + 3 * i;
    luma[i] = static_cast<double>((19595u * p[0] + 38470u * p[1] + 7471u * p[2] + 32768u) >> 16);
  }
  return luma;
}

uint64_t perceptual_hash(const Image& image) {
  const auto luma = phash_luma(image);
  return phash_bits(phash_low_frequencies(luma.data()));
}

Expected<uint64_t> perceptual_hash_encoded(const uint8_t* data, size_t size, uint64_t max_pixels) {
  ImageDecodeOptions options;
  options.max_pixels = max_pixels;
  options.min_width = kPhashDecodeMinSide;
  options.min_height = kPhashDecodeMinSide;
  VLM_ASSIGN_OR_RETURN(Image image, decode_image(data, size, {}, options));
  return perceptual_hash(image);
}

}  // namespace vlm
