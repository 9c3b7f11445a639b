// Rotary position embedding on CUDA, in place on [T, H, D] (rotate_half layout; each token's H x D contiguous,
// tokens at any larger stride: the q and k heads of a packed projection, rotated where it wrote them). The inverse
// frequencies are computed on the host exactly as cpu/rope.cpp does (double pow, rounded to f32) and passed by value,
// so both backends rotate by the same f32 angles. Two paths:
//   * vectors (D/2 a multiple of the 16-byte vector width, x 16-byte aligned): a thread owns one token, one group of
//     kVec16 consecutive frequencies and up to kMaxHeadsPerThread heads; it reads the token's position once,
//     computes its cos/sin pairs once and rotates the matching 16-byte vectors of both halves of each of its heads
//     (every load of the thread issued before the first store);
//   * scalar fallback: one block per token builds its cos/sin table in shared memory and rotates every (head, pair),
//     each pair owned by one thread.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace vlm::ops::cuda {

namespace {

constexpr int kMaxHalf = 512;  // head_dim <= 1024
constexpr int kThreads = 128;
constexpr int kMaxHeadsPerThread = 4;  // heads one thread of the vector path rotates (loads in flight: 2 per head)

struct InvFreq {
  float v[kMaxHalf];
};

// direction +1: rotate by +angle (forward); -1: by -angle (the transpose, for the backward).
template <class T>
__global__ void rope_kernel(T* x, const int32_t* __restrict__ positions, int64_t heads, int64_t head_dim,
                            int64_t token_stride, const InvFreq inv_freq, float direction) {
  pdl::grid_begin();
  __shared__ float cos_a[kMaxHalf], sin_a[kMaxHalf];
  const int64_t t = blockIdx.x, half = head_dim / 2;
  const float pos = static_cast<float>(positions[t]);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = pos * inv_freq.v[i];
    cos_a[i] = cosf(angle);
    sin_a[i] = direction * sinf(angle);
  }
  __syncthreads();
  T* xt = x + t * token_stride;
  for (int64_t j = threadIdx.x; j < heads * half; j += blockDim.x) {
    const int64_t h = j / half, i = j % half;
    T* lo = xt + h * head_dim;
    const float a = to_f32(lo[i]), b = to_f32(lo[i + half]), c = cos_a[i], s = sin_a[i];
    lo[i] = from_f32<T>(a * c - b * s);
    lo[i + half] = from_f32<T>(b * c + a * s);
  }
}

// The vector path: thread idx = (token t, head group hg, frequency group fg), fg fastest. Frequencies
// fg * kV .. fg * kV + kV - 1 of heads [hg * heads_per_thread, min(heads, (hg + 1) * heads_per_thread)).
template <class T>
__global__ void rope_vec_kernel(T* x, const int32_t* __restrict__ positions, int64_t tokens, int heads, int head_dim,
                                int64_t token_stride, int heads_per_thread, int head_groups, const InvFreq inv_freq,
                                float direction) {
  pdl::grid_begin();
  constexpr int kV = kVec16<T>;
  const int half = head_dim / 2, freq_groups = half / kV;
  const int64_t per_token = static_cast<int64_t>(head_groups) * freq_groups;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= tokens * per_token) return;
  const int64_t t = idx / per_token;
  const int rem = static_cast<int>(idx - t * per_token);
  const int hg = rem / freq_groups, fg = rem % freq_groups;
  const float pos = static_cast<float>(positions[t]);
  float c[kV], s[kV];
#pragma unroll
  for (int j = 0; j < kV; ++j) {
    const float angle = pos * inv_freq.v[fg * kV + j];
    c[j] = cosf(angle);  // as the fallback computes them
    s[j] = direction * sinf(angle);
  }
  const int h0 = hg * heads_per_thread, h1 = min(heads, h0 + heads_per_thread);
  T* xt = x + t * token_stride + fg * kV;  // frequency group fg of head 0 of token t
  uint4 lo[kMaxHeadsPerThread], hi[kMaxHeadsPerThread];
#pragma unroll
  for (int u = 0; u < kMaxHeadsPerThread; ++u) {
    if (h0 + u >= h1) break;
    lo[u] = load_raw16(xt + (h0 + u) * head_dim);
    hi[u] = load_raw16(xt + (h0 + u) * head_dim + half);
  }
#pragma unroll
  for (int u = 0; u < kMaxHeadsPerThread; ++u) {
    if (h0 + u >= h1) break;
    float a[kV], b[kV], out_lo[kV], out_hi[kV];
    unpack_vec16<T>(lo[u], a);
    unpack_vec16<T>(hi[u], b);
#pragma unroll
    for (int j = 0; j < kV; ++j) {
      out_lo[j] = a[j] * c[j] - b[j] * s[j];
      out_hi[j] = b[j] * c[j] + a[j] * s[j];
    }
    store_vec16(xt + (h0 + u) * head_dim, out_lo);
    store_vec16(xt + (h0 + u) * head_dim + half, out_hi);
  }
}

}  // namespace

void rope(Tensor& x, const Tensor& positions, float theta, bool backward) {
  const int64_t tokens = x.dim(0), heads = x.dim(1), head_dim = x.dim(2), half = head_dim / 2;
  const int64_t token_stride = x.strides()[0];
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
    cudaStream_t stream = stream_of(x.device());
    if (half % kVec16<T> == 0 && all_aligned16(ptr<T>(x)) && token_stride % kVec16<T> == 0) {
      const int head_groups = static_cast<int>(ceil_div(heads, kMaxHeadsPerThread));
      const int heads_per_thread = static_cast<int>(ceil_div(heads, head_groups));
      const int64_t threads = tokens * head_groups * (half / kVec16<T>);
      constexpr int kBlock = 256;
      pdl::launch(rope_vec_kernel<T>, static_cast<unsigned>(ceil_div(threads, kBlock)), kBlock, 0, stream, ptr<T>(x),
                  ptr<int32_t>(positions), tokens, static_cast<int>(heads), static_cast<int>(head_dim), token_stride,
                  heads_per_thread, head_groups, inv_freq, direction);
    } else {
      pdl::launch(rope_kernel<T>, static_cast<unsigned>(tokens), kThreads, 0, stream, ptr<T>(x),
                  ptr<int32_t>(positions), heads, head_dim, token_stride, inv_freq, direction);
    }
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::ops::cuda
