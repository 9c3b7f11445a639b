// The elementwise family on CUDA: cast (f32 <-> bf16), fill, scale, add, and the row-broadcast add of learned
// positions with its deterministic backward. cast, scale and add run the elementwise map kernel
// (elementwise_map.cuh) with a functor each: math in f32, bf16 rounded once on store.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/elementwise_map.cuh"

namespace vlm::ops::cuda {

namespace {

// ---- functors ----------------------------------------------------------------------------------------------------
struct Copy {
  __device__ void operator()(const float* x, float* y) const { y[0] = x[0]; }
};
struct Scale {
  float s;
  __device__ void operator()(const float* x, float* y) const { y[0] = x[0] * s; }
};
struct Add {
  __device__ void operator()(const float* x, float* y) const { y[0] = x[0] + x[1]; }
};

// x[0, n) = value; 8 elements per store when x is 16-byte aligned.
template <class T>
__global__ void fill_kernel(T* x, int64_t n, float value, bool vectorized) {
  pdl::grid_begin();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t scalar_from = 0;
  if (vectorized) {
    float v[kPack];
#pragma unroll
    for (int e = 0; e < kPack; ++e) v[e] = value;
    for (int64_t j = first; j < n / kPack; j += stride) store_pack(x + j * kPack, v);
    scalar_from = n / kPack * kPack;
  }
  for (int64_t i = scalar_from + first; i < n; i += stride) x[i] = from_f32<T>(value);
}

// x[i] += pos[i mod period] (period = P * C: the position table, broadcast over the B blocks).
template <class T>
__global__ void add_rows_broadcast_kernel(T* x, const T* __restrict__ pos, int64_t n, int64_t period) {
  pdl::grid_begin();
  VLM_GRID_STRIDE_LOOP(i, n) x[i] = from_f32<T>(to_f32(x[i]) + to_f32(pos[i % period]));
}

// dpos[j] += sum_b dx[b * period + j]: one thread per dpos element, blocks summed in order (deterministic).
template <class T>
__global__ void add_rows_broadcast_backward_kernel(float* dpos, const T* __restrict__ dx, int64_t blocks,
                                                   int64_t period) {
  pdl::grid_begin();
  VLM_GRID_STRIDE_LOOP(j, period) {
    float acc = 0.f;
    for (int64_t b = 0; b < blocks; ++b) acc += to_f32(dx[b * period + j]);
    dpos[j] += acc;
  }
}

}  // namespace

void cast(Tensor& out, const Tensor& in) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device());
  dispatch_float(in.dtype(), "cast", [&](auto in_tag) {
    using In = decltype(in_tag);
    dispatch_float(out.dtype(), "cast", [&](auto out_tag) {
      using Out = decltype(out_tag);
      launch_map(MapArgs<In, Out, 1, 1>{{ptr<Out>(out)}, {ptr<In>(in)}, n}, Copy{}, stream_of(out.device()));
    });
  });
}

void fill(Tensor& x, float value) {
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "fill", [&](auto tag) {
    using T = decltype(tag);
    const bool vectorized = all_aligned16(ptr<T>(x));
    pdl::launch(fill_kernel<T>, grid_for(vectorized ? ceil_div(n, kPack) : n, kThreads), kThreads, 0,
                stream_of(x.device()), ptr<T>(x), n, value, vectorized);
    VLM_CUDA_CHECK_LAUNCH();
  });
}

void scale(Tensor& x, float s) {
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "scale", [&](auto tag) {
    using T = decltype(tag);
    launch_map(MapArgs<T, T, 1, 1>{{ptr<T>(x)}, {ptr<T>(x)}, n}, Scale{s}, stream_of(x.device()));
  });
}

void add(Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device());
  dispatch_float(out.dtype(), "add", [&](auto tag) {
    using T = decltype(tag);
    launch_map(MapArgs<T, T, 2, 1>{{ptr<T>(out)}, {ptr<T>(a), ptr<T>(b)}, n}, Add{}, stream_of(out.device()));
  });
}

void add_inplace(Tensor& a, const Tensor& b) { add(a, a, b); }

void add_rows_broadcast(Tensor& x, const Tensor& pos, int64_t blocks) {
  const int64_t n = x.numel(), period = pos.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "add_rows_broadcast", [&](auto tag) {
    using T = decltype(tag);
    pdl::launch(add_rows_broadcast_kernel<T>, grid_for(n, kThreads), kThreads, 0, stream_of(x.device()), ptr<T>(x),
                ptr<T>(pos), n, period);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void add_rows_broadcast_backward(Tensor& dpos, const Tensor& dx, int64_t blocks) {
  const int64_t period = dpos.numel();
  if (period == 0 || blocks == 0) return;
  DeviceGuard guard(dpos.device());
  dispatch_float(dx.dtype(), "add_rows_broadcast_backward", [&](auto tag) {
    using T = decltype(tag);
    pdl::launch(add_rows_broadcast_backward_kernel<T>, grid_for(period, kThreads), kThreads, 0,
                stream_of(dpos.device()), ptr<float>(dpos), ptr<T>(dx), blocks, period);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void set_pdl_for_testing(int on) { pdl::force_for_testing(on); }

}  // namespace vlm::ops::cuda
