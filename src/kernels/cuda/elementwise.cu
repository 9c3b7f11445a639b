// Elementwise CUDA ops: cast (f32 <-> bf16), fill, scale, add, the row-broadcast add of learned positions (and its
// deterministic backward), GELU-tanh and SwiGLU forward/backward. One vectorized map kernel (8 elements per thread per
// iteration through 16-byte loads/stores, scalar for misaligned views and the tail) with a functor per op; math in f32
// with the CPU reference's formulas (cpu/activation.cpp), bf16 rounded once on store.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace vlm::ops::cuda {

namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// ---- the elementwise map -----------------------------------------------------------------------------------------
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

// ---- functors: the CPU reference's formulas (cpu/activation.cpp) ---------------------------------------------------
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
// y = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3).
struct GeluForward {
  __device__ void operator()(const float* x, float* y) const {
    const float xi = x[0];
    const float u = kSqrt2OverPi * (xi + kGeluCubic * xi * xi * xi);
    y[0] = 0.5f * xi * (1.f + tanhf(u));
  }
};
// inputs (dy, x) -> dx
struct GeluBackward {
  __device__ void operator()(const float* in, float* out) const {
    const float xi = in[1];
    const float u = kSqrt2OverPi * (xi + kGeluCubic * xi * xi * xi);
    const float th = tanhf(u);
    const float du = kSqrt2OverPi * (1.f + 3.f * kGeluCubic * xi * xi);
    out[0] = in[0] * (0.5f * (1.f + th) + 0.5f * xi * (1.f - th * th) * du);
  }
};
// inputs (gate, up) -> silu(gate) * up
struct SwigluForward {
  __device__ void operator()(const float* in, float* out) const {
    const float g = in[0];
    const float sig = 1.f / (1.f + expf(-g));
    out[0] = g * sig * in[1];
  }
};
// inputs (dy, gate, up) -> (dgate, dup): dgate = dy * u * sig (1 + g (1 - sig)),  dup = dy * silu(g).
struct SwigluBackward {
  __device__ void operator()(const float* in, float* out) const {
    const float d = in[0], g = in[1], u = in[2];
    const float sig = 1.f / (1.f + expf(-g));
    out[0] = d * u * sig * (1.f + g * (1.f - sig));
    out[1] = d * g * sig;
  }
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

void gelu_tanh_forward(Tensor& y, const Tensor& x) {
  const int64_t n = y.numel();
  if (n == 0) return;
  DeviceGuard guard(y.device());
  dispatch_float(y.dtype(), "gelu_tanh_forward", [&](auto tag) {
    using T = decltype(tag);
    launch_map(MapArgs<T, T, 1, 1>{{ptr<T>(y)}, {ptr<T>(x)}, n}, GeluForward{}, stream_of(y.device()));
  });
}

void gelu_tanh_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  const int64_t n = dx.numel();
  if (n == 0) return;
  DeviceGuard guard(dx.device());
  dispatch_float(dx.dtype(), "gelu_tanh_backward", [&](auto tag) {
    using T = decltype(tag);
    launch_map(MapArgs<T, T, 2, 1>{{ptr<T>(dx)}, {ptr<T>(dy), ptr<T>(x)}, n}, GeluBackward{},
               stream_of(dx.device()));
  });
}

void swiglu_forward(Tensor& y, const Tensor& gate, const Tensor& up) {
  const int64_t n = y.numel();
  if (n == 0) return;
  DeviceGuard guard(y.device());
  dispatch_float(y.dtype(), "swiglu_forward", [&](auto tag) {
    using T = decltype(tag);
    launch_map(MapArgs<T, T, 2, 1>{{ptr<T>(y)}, {ptr<T>(gate), ptr<T>(up)}, n}, SwigluForward{},
               stream_of(y.device()));
  });
}

void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dy, const Tensor& gate, const Tensor& up) {
  const int64_t n = dy.numel();
  if (n == 0 || (!dgate.defined() && !dup.defined())) return;
  DeviceGuard guard(dy.device());
  dispatch_float(dy.dtype(), "swiglu_backward", [&](auto tag) {
    using T = decltype(tag);
    launch_map(MapArgs<T, T, 3, 2>{{ptr_or_null<T>(dgate), ptr_or_null<T>(dup)}, {ptr<T>(dy), ptr<T>(gate), ptr<T>(up)},
                                   n},
               SwigluBackward{}, stream_of(dy.device()));
  });
}

void set_pdl_for_testing(int on) { pdl::force_for_testing(on); }

}  // namespace vlm::ops::cuda
