// The activation family on CUDA: GELU-tanh and SwiGLU forward/backward, through the elementwise map kernel
// (elementwise_map.cuh) with a functor per op; math in f32 with the CPU reference's formulas (cpu/activation.cpp),
// bf16 rounded once on store.
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/elementwise_map.cuh"

namespace vlm::ops::cuda {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// ---- functors: the CPU reference's formulas (cpu/activation.cpp) ---------------------------------------------------
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

}  // namespace

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

}  // namespace vlm::ops::cuda
