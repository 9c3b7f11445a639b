// Rotary position embedding, Hugging Face "rotate_half" layout, in place on [T, H, D].
// The angles follow transformers' recipe: inv_freq[i] = 1 / theta^(2i/D) (computed in double, rounded to f32),
// angle = f32(pos) * inv_freq[i] in f32, then cos/sin of that f32 angle; one cos/sin table per token, shared by
// all heads. Parallel over tokens. The three building blocks are shared with packed.cpp (the QKV split applies
// them to the packed projection), so both rotate with the same bits.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"

namespace vlm::ops::cpu {

std::vector<float> rope_inv_freq(int64_t head_dim, float theta) {
  const int64_t half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[static_cast<size_t>(i)] =
        static_cast<float>(1.0 / std::pow(static_cast<double>(theta), 2.0 * static_cast<double>(i) / head_dim));
  return inv_freq;
}

void rope_angles(float* cos_a, float* sin_a, const float* inv_freq, int64_t half, int32_t position, float direction) {
  const float pos = static_cast<float>(position);
  for (int64_t i = 0; i < half; ++i) {
    const float angle = pos * inv_freq[i];
    cos_a[i] = std::cos(angle);
    sin_a[i] = direction * std::sin(angle);
  }
}

void rope_rotate_heads(float* dst, const float* src, int64_t heads, int64_t head_dim, const float* cos_a,
                       const float* sin_a) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    const float* lo = src + h * head_dim;
    const float* hi = lo + half;
    float* out_lo = dst + h * head_dim;
    float* out_hi = out_lo + half;
    for (int64_t i = 0; i < half; ++i) {
      const float a = lo[i], b = hi[i], c = cos_a[i], s = sin_a[i];  // both read before either write (in place)
      out_lo[i] = a * c - b * s;
      out_hi[i] = b * c + a * s;
    }
  }
}

namespace {

// direction +1: rotate by +angle (forward); -1: by -angle (the transpose, for the backward).
void rope_apply(float* x, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim, float theta,
                float direction) {
  const int64_t half = head_dim / 2;
  const std::vector<float> inv_freq = rope_inv_freq(head_dim, theta);
#pragma omp parallel if (tokens * heads * head_dim >= kParallelMinWork / 4)
  {
    std::vector<float> cos_a(static_cast<size_t>(half)), sin_a(static_cast<size_t>(half));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
      rope_angles(cos_a.data(), sin_a.data(), inv_freq.data(), half, positions[t], direction);
      float* xt = x + t * heads * head_dim;
      rope_rotate_heads(xt, xt, heads, head_dim, cos_a.data(), sin_a.data());
    }
  }
}

}  // namespace

void rope_forward(float* x, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim, float theta) {
  rope_apply(x, positions, tokens, heads, head_dim, theta, 1.f);
}

void rope_backward(float* dx, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim, float theta) {
  rope_apply(dx, positions, tokens, heads, head_dim, theta, -1.f);
}

}  // namespace vlm::ops::cpu
