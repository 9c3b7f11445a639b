// Rotary position embedding on CUDA, in place on [T, H, D] (rotate_half layout). The inverse frequencies are
// computed on the host exactly as cpu/rope.cpp does (double pow, rounded to f32) and passed by value, so both
// backends rotate by the same f32 angles; one block per token builds its cos/sin table in shared memory and rotates
// every (head, pair) of the token, each pair owned by one thread.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace vlm::ops::cuda {

namespace {

constexpr int kMaxHalf = 512;  // head_dim <= 1024
constexpr int kThreads = 128;

struct InvFreq {
  float v[kMaxHalf];
};

// direction +1: rotate by +angle (forward); -1: by -angle (the transpose, for the backward).
template <class T>
__global__ void rope_kernel(T* x, const int32_t* __restrict__ positions, int64_t heads, int64_t head_dim,
                            const InvFreq inv_freq, float direction) {
  __shared__ float cos_a[kMaxHalf], sin_a[kMaxHalf];
  const int64_t t = blockIdx.x, half = head_dim / 2;
  const float pos = static_cast<float>(positions[t]);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = pos * inv_freq.v[i];
    cos_a[i] = cosf(angle);
    sin_a[i] = direction * sinf(angle);
  }
  __syncthreads();
  T* xt = x + t * heads * head_dim;
  for (int64_t j = threadIdx.x; j < heads * half; j += blockDim.x) {
    const int64_t h = j / half, i = j % half;
    T* lo = xt + h * head_dim;
    const float a = to_f32(lo[i]), b = to_f32(lo[i + half]), c = cos_a[i], s = sin_a[i];
    lo[i] = from_f32<T>(a * c - b * s);
    lo[i + half] = from_f32<T>(b * c + a * s);
  }
}

}  // namespace

void rope(Tensor& x, const Tensor& positions, float theta, bool backward) {
  const int64_t tokens = x.dim(0), heads = x.dim(1), head_dim = x.dim(2), half = head_dim / 2;
  VLM_CHECK(half <= kMaxHalf, "ops::rope: head dim ", head_dim, " exceeds the CUDA kernel's ", 2 * kMaxHalf);
  if (tokens == 0 || heads == 0 || half == 0) return;
  InvFreq inv_freq{};
  for (int64_t i = 0; i < half; ++i)
    inv_freq.v[i] =
        static_cast<float>(1.0 / std::pow(static_cast<double>(theta), 2.0 * static_cast<double>(i) / head_dim));
  DeviceGuard guard(x.device());
  const float direction = backward ? -1.f : 1.f;
  dispatch_float(x.dtype(), backward ? "rope_backward" : "rope_forward", [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<static_cast<unsigned>(tokens), kThreads, 0, stream_of(x.device())>>>(
        ptr<T>(x), ptr<int32_t>(positions), heads, head_dim, inv_freq, direction);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::ops::cuda
