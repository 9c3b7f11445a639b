// GELU (tanh approximation) and SwiGLU, elementwise. The SwiGLU math lives in serial span kernels that packed.cpp
// also runs on the rows of the packed gate/up projection, so both give the same bits.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"

namespace vlm::ops::cpu {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
constexpr int64_t kSpanChunk = 1024;  // elements per parallel work item of the SwiGLU ops
}  // namespace

// y = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3).
void gelu_tanh_forward(float* y, const float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinWork / 8)
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float u = kSqrt2OverPi * (xi + kGeluCubic * xi * xi * xi);
    y[i] = 0.5f * xi * (1.f + std::tanh(u));
  }
}

// dy/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
void gelu_tanh_backward(float* dx, const float* dy, const float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinWork / 8)
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float u = kSqrt2OverPi * (xi + kGeluCubic * xi * xi * xi);
    const float th = std::tanh(u);
    const float du = kSqrt2OverPi * (1.f + 3.f * kGeluCubic * xi * xi);
    dx[i] = dy[i] * (0.5f * (1.f + th) + 0.5f * xi * (1.f - th * th) * du);
  }
}

// y = silu(g) * u,  silu(g) = g * sigmoid(g).
void swiglu_forward_span(float* y, const float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float sig = 1.f / (1.f + std::exp(-g));
    y[i] = g * sig * up[i];
  }
}

// dgate = dy * u * sigmoid(g) (1 + g (1 - sigmoid(g))),  dup = dy * silu(g).
void swiglu_backward_span(float* dgate, float* dup, const float* dy, const float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], u = up[i], d = dy[i];  // read all before writing: outputs may alias inputs
    const float sig = 1.f / (1.f + std::exp(-g));
    if (dgate != nullptr) dgate[i] = d * u * sig * (1.f + g * (1.f - sig));
    if (dup != nullptr) dup[i] = d * g * sig;
  }
}

// The ops run the span kernels on fixed chunks in parallel (elementwise: the chunking does not change any bit).
void swiglu_forward(float* y, const float* gate, const float* up, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinWork / 8)
  for (int64_t c = 0; c < n; c += kSpanChunk)
    swiglu_forward_span(y + c, gate + c, up + c, std::min(kSpanChunk, n - c));
}

void swiglu_backward(float* dgate, float* dup, const float* dy, const float* gate, const float* up, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinWork / 8)
  for (int64_t c = 0; c < n; c += kSpanChunk)
    swiglu_backward_span(dgate != nullptr ? dgate + c : nullptr, dup != nullptr ? dup + c : nullptr, dy + c,
                         gate + c, up + c, std::min(kSpanChunk, n - c));
}

}  // namespace vlm::ops::cpu
