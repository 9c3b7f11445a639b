// Rotary position embedding, Hugging Face "rotate_half" layout, in place on [T, H, D].
// The angles follow transformers' recipe: inv_freq[i] = 1 / theta^(2i/D) (computed in double, rounded to f32),
// angle = f32(pos) * inv_freq[i] in f32, then cos/sin of that f32 angle; one cos/sin table per token, shared by
// all heads. Parallel over tokens.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"

namespace vlm::ops::cpu {

namespace {

// direction +1: rotate by +angle (forward); -1: by -angle (the transpose, for the backward).
void rope_apply(float* x, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim, float theta,
                float direction) {
  const int64_t half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[static_cast<size_t>(i)] =
        static_cast<float>(1.0 / std::pow(static_cast<double>(theta), 2.0 * static_cast<double>(i) / head_dim));
#pragma omp parallel if (tokens * heads * head_dim >= kParallelMinWork / 4)
  {
    std::vector<float> cos_a(static_cast<size_t>(half)), sin_a(static_cast<size_t>(half));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
      const float pos = static_cast<float>(positions[t]);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = pos * inv_freq[static_cast<size_t>(i)];
        cos_a[static_cast<size_t>(i)] = std::cos(angle);
        sin_a[static_cast<size_t>(i)] = direction * std::sin(angle);
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* lo = x + (t * heads + h) * head_dim;
        float* hi = lo + half;
        for (int64_t i = 0; i < half; ++i) {
          const float a = lo[i], b = hi[i], c = cos_a[static_cast<size_t>(i)], s = sin_a[static_cast<size_t>(i)];
          lo[i] = a * c - b * s;
          hi[i] = b * c + a * s;
        }
      }
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
