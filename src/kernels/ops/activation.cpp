// The activation family's op boundary: GELU (tanh approximation) and SwiGLU, forward and backward. Each op validates,
// then dispatches to cuda/activation.cu or the CPU reference in cpu/activation.cpp.
#include "kernels/ops.h"

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops/check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops/check.h

void gelu_tanh_forward(Tensor& y, const Tensor& x) {
  const char* op = "gelu_tanh_forward";
  const DType dt = compute_dtype(op, "y", y);
  check_tensor(op, "y", y, dt, y.device());
  check_like(op, "x", x, dt, y.device(), y.shape());
  VLM_DISPATCH_CUDA(y.device(), op, cuda::gelu_tanh_forward(y, x));
  cpu::gelu_tanh_forward(y.data<float>(), x.data<float>(), y.numel());
}

void gelu_tanh_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  const char* op = "gelu_tanh_backward";
  const DType dt = compute_dtype(op, "dx", dx);
  check_tensor(op, "dx", dx, dt, dx.device());
  check_like(op, "dy", dy, dt, dx.device(), dx.shape());
  check_like(op, "x", x, dt, dx.device(), dx.shape());
  VLM_DISPATCH_CUDA(dx.device(), op, cuda::gelu_tanh_backward(dx, dy, x));
  cpu::gelu_tanh_backward(dx.data<float>(), dy.data<float>(), x.data<float>(), dx.numel());
}

void swiglu_forward(Tensor& y, const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_forward";
  const DType dt = compute_dtype(op, "y", y);
  check_tensor(op, "y", y, dt, y.device());
  check_like(op, "gate", gate, dt, y.device(), y.shape());
  check_like(op, "up", up, dt, y.device(), y.shape());
  VLM_DISPATCH_CUDA(y.device(), op, cuda::swiglu_forward(y, gate, up));
  cpu::swiglu_forward(y.data<float>(), gate.data<float>(), up.data<float>(), y.numel());
}

void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dy, const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_backward";
  const Device dev = dy.device();
  const DType dt = compute_dtype(op, "dy", dy);
  check_tensor(op, "dy", dy, dt, dev);
  check_like(op, "gate", gate, dt, dev, dy.shape());
  check_like(op, "up", up, dt, dev, dy.shape());
  check_optional(op, "dgate", dgate, dt, dev, dy.shape());
  check_optional(op, "dup", dup, dt, dev, dy.shape());
  VLM_DISPATCH_CUDA(dev, op, cuda::swiglu_backward(dgate, dup, dy, gate, up));
  cpu::swiglu_backward(f32_or_null(dgate), f32_or_null(dup), dy.data<float>(), gate.data<float>(), up.data<float>(),
                       dy.numel());
}

}  // namespace vlm::ops
