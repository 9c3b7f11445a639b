// Elementwise CUDA ops: cast (f32 <-> bf16), fill, scale, add, the row-broadcast add of learned positions (and its
// deterministic backward), GELU-tanh and SwiGLU forward/backward. Grid-stride loops, one element per iteration, math
// in f32 with the CPU reference's formulas (cpu/activation.cpp), bf16 rounded once on store.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace vlm::ops::cuda {

namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

template <class In, class Out>
__global__ void cast_kernel(Out* __restrict__ out, const In* __restrict__ in, int64_t n) {
  VLM_GRID_STRIDE_LOOP(i, n) out[i] = from_f32<Out>(to_f32(in[i]));
}

template <class T>
__global__ void fill_kernel(T* x, int64_t n, float value) {
  const T v = from_f32<T>(value);
  VLM_GRID_STRIDE_LOOP(i, n) x[i] = v;
}

template <class T>
__global__ void scale_kernel(T* x, int64_t n, float s) {
  VLM_GRID_STRIDE_LOOP(i, n) x[i] = from_f32<T>(to_f32(x[i]) * s);
}

// out = a + b; out may alias a or b (each element is read before it is written, by the same thread).
template <class T>
__global__ void add_kernel(T* out, const T* a, const T* b, int64_t n) {
  VLM_GRID_STRIDE_LOOP(i, n) out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

// x[i] += pos[i mod period] (period = P * C: the position table, broadcast over the B blocks).
template <class T>
__global__ void add_rows_broadcast_kernel(T* x, const T* __restrict__ pos, int64_t n, int64_t period) {
  VLM_GRID_STRIDE_LOOP(i, n) x[i] = from_f32<T>(to_f32(x[i]) + to_f32(pos[i % period]));
}

// dpos[j] += sum_b dx[b * period + j]: one thread per dpos element, blocks summed in order (deterministic).
template <class T>
__global__ void add_rows_broadcast_backward_kernel(float* dpos, const T* __restrict__ dx, int64_t blocks,
                                                   int64_t period) {
  VLM_GRID_STRIDE_LOOP(j, period) {
    float acc = 0.f;
    for (int64_t b = 0; b < blocks; ++b) acc += to_f32(dx[b * period + j]);
    dpos[j] += acc;
  }
}

// y = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3).
template <class T>
__global__ void gelu_forward_kernel(T* y, const T* x, int64_t n) {
  VLM_GRID_STRIDE_LOOP(i, n) {
    const float xi = to_f32(x[i]);
    const float u = kSqrt2OverPi * (xi + kGeluCubic * xi * xi * xi);
    y[i] = from_f32<T>(0.5f * xi * (1.f + tanhf(u)));
  }
}

template <class T>
__global__ void gelu_backward_kernel(T* dx, const T* dy, const T* x, int64_t n) {
  VLM_GRID_STRIDE_LOOP(i, n) {
    const float xi = to_f32(x[i]);
    const float u = kSqrt2OverPi * (xi + kGeluCubic * xi * xi * xi);
    const float th = tanhf(u);
    const float du = kSqrt2OverPi * (1.f + 3.f * kGeluCubic * xi * xi);
    dx[i] = from_f32<T>(to_f32(dy[i]) * (0.5f * (1.f + th) + 0.5f * xi * (1.f - th * th) * du));
  }
}

// y = silu(g) * u.
template <class T>
__global__ void swiglu_forward_kernel(T* y, const T* gate, const T* up, int64_t n) {
  VLM_GRID_STRIDE_LOOP(i, n) {
    const float g = to_f32(gate[i]);
    const float sig = 1.f / (1.f + expf(-g));
    y[i] = from_f32<T>(g * sig * to_f32(up[i]));
  }
}

// dgate = dy * u * sig (1 + g (1 - sig)),  dup = dy * silu(g); either may be null; outputs may alias inputs.
template <class T>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, const T* dy, const T* gate, const T* up, int64_t n) {
  VLM_GRID_STRIDE_LOOP(i, n) {
    const float g = to_f32(gate[i]), u = to_f32(up[i]), d = to_f32(dy[i]);
    const float sig = 1.f / (1.f + expf(-g));
    if (dgate != nullptr) dgate[i] = from_f32<T>(d * u * sig * (1.f + g * (1.f - sig)));
    if (dup != nullptr) dup[i] = from_f32<T>(d * g * sig);
  }
}

}  // namespace

void cast(Tensor& out, const Tensor& in) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device());
  cudaStream_t stream = stream_of(out.device());
  dispatch_float(in.dtype(), "cast", [&](auto in_tag) {
    using In = decltype(in_tag);
    dispatch_float(out.dtype(), "cast", [&](auto out_tag) {
      using Out = decltype(out_tag);
      cast_kernel<In, Out><<<grid_for(n, kThreads), kThreads, 0, stream>>>(ptr<Out>(out), ptr<In>(in), n);
    });
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void fill(Tensor& x, float value) {
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "fill", [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(x.device())>>>(ptr<T>(x), n, value);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void scale(Tensor& x, float s) {
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "scale", [&](auto tag) {
    using T = decltype(tag);
    scale_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(x.device())>>>(ptr<T>(x), n, s);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void add(Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out.device());
  dispatch_float(out.dtype(), "add", [&](auto tag) {
    using T = decltype(tag);
    add_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(out.device())>>>(ptr<T>(out), ptr<T>(a),
                                                                                    ptr<T>(b), n);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void add_inplace(Tensor& a, const Tensor& b) { add(a, a, b); }

void add_rows_broadcast(Tensor& x, const Tensor& pos, int64_t blocks) {
  const int64_t n = x.numel(), period = pos.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "add_rows_broadcast", [&](auto tag) {
    using T = decltype(tag);
    add_rows_broadcast_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(x.device())>>>(
        ptr<T>(x), ptr<T>(pos), n, period);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void add_rows_broadcast_backward(Tensor& dpos, const Tensor& dx, int64_t blocks) {
  const int64_t period = dpos.numel();
  if (period == 0 || blocks == 0) return;
  DeviceGuard guard(dpos.device());
  dispatch_float(dx.dtype(), "add_rows_broadcast_backward", [&](auto tag) {
    using T = decltype(tag);
    add_rows_broadcast_backward_kernel<T><<<grid_for(period, kThreads), kThreads, 0, stream_of(dpos.device())>>>(
        ptr<float>(dpos), ptr<T>(dx), blocks, period);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void gelu_tanh_forward(Tensor& y, const Tensor& x) {
  const int64_t n = y.numel();
  if (n == 0) return;
  DeviceGuard guard(y.device());
  dispatch_float(y.dtype(), "gelu_tanh_forward", [&](auto tag) {
    using T = decltype(tag);
    gelu_forward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(y.device())>>>(ptr<T>(y), ptr<T>(x), n);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void gelu_tanh_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  const int64_t n = dx.numel();
  if (n == 0) return;
  DeviceGuard guard(dx.device());
  dispatch_float(dx.dtype(), "gelu_tanh_backward", [&](auto tag) {
    using T = decltype(tag);
    gelu_backward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(dx.device())>>>(ptr<T>(dx), ptr<T>(dy),
                                                                                             ptr<T>(x), n);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void swiglu_forward(Tensor& y, const Tensor& gate, const Tensor& up) {
  const int64_t n = y.numel();
  if (n == 0) return;
  DeviceGuard guard(y.device());
  dispatch_float(y.dtype(), "swiglu_forward", [&](auto tag) {
    using T = decltype(tag);
    swiglu_forward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(y.device())>>>(ptr<T>(y), ptr<T>(gate),
                                                                                             ptr<T>(up), n);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dy, const Tensor& gate, const Tensor& up) {
  const int64_t n = dy.numel();
  if (n == 0 || (!dgate.defined() && !dup.defined())) return;
  DeviceGuard guard(dy.device());
  dispatch_float(dy.dtype(), "swiglu_backward", [&](auto tag) {
    using T = decltype(tag);
    swiglu_backward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream_of(dy.device())>>>(
        ptr_or_null<T>(dgate), ptr_or_null<T>(dup), ptr<T>(dy), ptr<T>(gate), ptr<T>(up), n);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::ops::cuda
