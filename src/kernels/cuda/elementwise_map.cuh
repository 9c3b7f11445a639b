// The elementwise map kernel, shared by elementwise.cu and activation.cu. It sits in an unnamed namespace like every
// kernel of a .cu file here: each file that includes it instantiates its own.
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace vlm::ops::cuda {

namespace {

constexpr int kThreads = 256;

// map_kernel applies a functor F elementwise: y_k[i] = F(x_0[i], ..., x_{NI-1}[i])_k for k < NO, math in f32. A
// thread handles 8 consecutive elements per iteration with 16-byte loads and stores when every pointer is 16-byte
// aligned (bf16: one vector, f32: two), the scalar grid-stride loop otherwise and for the tail. An output pointer may
// be null (skipped) and may alias an input: each element is read before it is written, by the same thread.
constexpr int kPack = 8;

template <class T>
__device__ __forceinline__ void load_pack(const T* p, float (&v)[kPack]) {
  if constexpr (kVec16<T> == kPack) {
    load_vec16(p, v);
  } else {
    float lo[kVec16<T>], hi[kVec16<T>];
    load_vec16(p, lo);
    load_vec16(p + kVec16<T>, hi);
#pragma unroll
    for (int e = 0; e < kVec16<T>; ++e) {
      v[e] = lo[e];
      v[kVec16<T> + e] = hi[e];
    }
  }
}

template <class T>
__device__ __forceinline__ void store_pack(T* p, const float (&v)[kPack]) {
  if constexpr (kVec16<T> == kPack) {
    store_vec16(p, v);
  } else {
    float lo[kVec16<T>], hi[kVec16<T>];
#pragma unroll
    for (int e = 0; e < kVec16<T>; ++e) {
      lo[e] = v[e];
      hi[e] = v[kVec16<T> + e];
    }
    store_vec16(p, lo);
    store_vec16(p + kVec16<T>, hi);
  }
}

template <class TIn, class TOut, int NI, int NO>
struct MapArgs {
  TOut* out[NO];
  const TIn* in[NI];
  int64_t n;
};

template <class TIn, class TOut, int NI, int NO, class F>
__global__ void map_kernel(MapArgs<TIn, TOut, NI, NO> a, F f, bool vectorized) {
  pdl::grid_begin();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t scalar_from = 0;
  if (vectorized) {
    const int64_t packs = a.n / kPack;
    for (int64_t j = first; j < packs; j += stride) {
      float x[NI][kPack], y[NO][kPack];
#pragma unroll
      for (int k = 0; k < NI; ++k) load_pack(a.in[k] + j * kPack, x[k]);
#pragma unroll
      for (int e = 0; e < kPack; ++e) {
        float xe[NI], ye[NO];
#pragma unroll
        for (int k = 0; k < NI; ++k) xe[k] = x[k][e];
        f(xe, ye);
#pragma unroll
        for (int k = 0; k < NO; ++k) y[k][e] = ye[k];
      }
#pragma unroll
      for (int k = 0; k < NO; ++k)
        if (a.out[k] != nullptr) store_pack(a.out[k] + j * kPack, y[k]);
    }
    scalar_from = packs * kPack;
  }
  for (int64_t i = scalar_from + first; i < a.n; i += stride) {
    float xe[NI], ye[NO];
#pragma unroll
    for (int k = 0; k < NI; ++k) xe[k] = to_f32(a.in[k][i]);
    f(xe, ye);
#pragma unroll
    for (int k = 0; k < NO; ++k)
      if (a.out[k] != nullptr) a.out[k][i] = from_f32<TOut>(ye[k]);
  }
}

template <class TIn, class TOut, int NI, int NO>
bool map_aligned(const MapArgs<TIn, TOut, NI, NO>& a) {
  bool ok = true;
  for (int k = 0; k < NI; ++k) ok = ok && all_aligned16(a.in[k]);
  for (int k = 0; k < NO; ++k) ok = ok && all_aligned16(a.out[k]);
  return ok;
}

// Launches map_kernel over a.n > 0 elements on `stream`.
template <class TIn, class TOut, int NI, int NO, class F>
void launch_map(const MapArgs<TIn, TOut, NI, NO>& a, F f, cudaStream_t stream) {
  const bool vectorized = map_aligned(a);
  const int64_t work = vectorized ? ceil_div(a.n, kPack) : a.n;
  pdl::launch(map_kernel<TIn, TOut, NI, NO, F>, grid_for(work, kThreads), kThreads, 0, stream, a, f, vectorized);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

}  // namespace vlm::ops::cuda
