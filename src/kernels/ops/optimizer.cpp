// The optimizer family's op boundary: AdamW (one tensor, or many in a few fused launches, optionally clipped by a
// gradient norm read on the device), zero_multi and the fp64 sums (of squares, for the gradient norm; plain, for the
// loss). Each op validates, then dispatches to cuda/optimizer.cu or the CPU reference in cpu/optimizer.cpp.
#include "kernels/ops.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/clip_factor.h"
#include "kernels/ops/check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops/check.h

namespace {
void check_adamw_params(const char* op, const AdamWParams& p) {
  VLM_CHECK(p.step >= 1, "ops::", op, ": step ", p.step, " must be >= 1 (1-based, for the bias correction)");
  VLM_CHECK(p.beta1 >= 0.f && p.beta1 < 1.f && p.beta2 >= 0.f && p.beta2 < 1.f, "ops::", op, ": betas (", p.beta1, ", ",
            p.beta2, ") must lie in [0, 1)");
}

// One tensor set: param, grad, m, v f32 of one shape on `dev`; param_bf16 (optional) bf16 of that shape.
void check_adamw_tensors(const char* op, const AdamWTensors& t, Device dev) {
  check_tensor(op, "param", t.param, DType::f32, dev);
  check_like(op, "grad", t.grad, DType::f32, dev, t.param.shape());
  check_like(op, "m", t.m, DType::f32, dev, t.param.shape());
  check_like(op, "v", t.v, DType::f32, dev, t.param.shape());
  check_optional(op, "param_bf16", t.param_bf16, DType::bf16, dev, t.param.shape());
}

// The step's scalars with the bias corrections computed in double.
cpu::AdamWScalars adamw_scalars(const AdamWParams& p) {
  const double step = static_cast<double>(p.step);
  return {p.lr,
          p.beta1,
          p.beta2,
          p.eps,
          p.weight_decay,
          p.grad_scale,
          static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta1), step)),
          static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta2), step))};
}

void adamw_cpu(const AdamWTensors& t, const cpu::AdamWScalars& s) {
  cpu::adamw_step(t.param.data<float>(), t.grad.data<float>(), t.m.data<float>(), t.v.data<float>(), t.param.numel(),
                  s);
  if (!t.param_bf16.defined()) return;
  const float* src = t.param.data<float>();
  auto* dst = static_cast<uint16_t*>(t.param_bf16.raw_data());
  for (int64_t i = 0; i < t.param.numel(); ++i) dst[i] = f32_to_bf16(src[i]);
}

// Every entry of a multi-tensor AdamW step: defined, and a valid tensor set on `dev`.
void check_adamw_list(const char* op, const std::vector<AdamWTensors>& tensors, Device dev) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = str("tensors[", i, "]");
    VLM_CHECK(tensors[i].param.defined(), "ops::", op, ": ", name, ".param is undefined");
    check_adamw_tensors(str(op, ": ", name).c_str(), tensors[i], dev);
  }
}

// The output of a reduction to one f64 (sum, sum_of_squares).
void check_f64_scalar(const char* op, const Tensor& out) {
  check_tensor(op, "out", out, DType::f64, out.device());
  VLM_CHECK(out.numel() == 1, "ops::", op, ": out must hold one f64, got ", out.describe());
}

#ifdef VLM_HAVE_CUDA
cuda::AdamWScalars to_cuda(const cpu::AdamWScalars& s) {
  return {s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.grad_scale, s.bias_correction1, s.bias_correction2};
}
#endif
}  // namespace

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p) {
  Tensor none;
  adamw_step(param, grad, m, v, p, none);
}

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p, Tensor& param_bf16) {
  const char* op = "adamw_step";
  const AdamWTensors t{param, grad, m, v, param_bf16};
  check_adamw_tensors(op, t, param.device());
  check_adamw_params(op, p);
  const cpu::AdamWScalars s = adamw_scalars(p);
  VLM_DISPATCH_CUDA(param.device(), op, cuda::adamw_step_multi({t}, to_cuda(s)));
  adamw_cpu(t, s);
}

void adamw_step_multi(const std::vector<AdamWTensors>& tensors, const AdamWParams& p) {
  const char* op = "adamw_step_multi";
  check_adamw_params(op, p);
  if (tensors.empty()) return;
  const Device dev = tensors.front().param.device();
  check_adamw_list(op, tensors, dev);
  const cpu::AdamWScalars s = adamw_scalars(p);
  VLM_DISPATCH_CUDA(dev, op, cuda::adamw_step_multi(tensors, to_cuda(s)));
  for (const AdamWTensors& t : tensors) adamw_cpu(t, s);
}

void adamw_step_multi(const std::vector<AdamWTensors>& tensors, const AdamWParams& p,
                      const Tensor& grad_sum_of_squares) {
  const char* op = "adamw_step_multi";
  check_adamw_params(op, p);
  if (tensors.empty()) return;
  const Device dev = tensors.front().param.device();
  check_like(op, "grad_sum_of_squares", grad_sum_of_squares, DType::f64, dev, Shape{1});
  check_adamw_list(op, tensors, dev);
  cpu::AdamWScalars s = adamw_scalars(p);
  const profile::OpRange range(op, dev);  // not through VLM_DISPATCH_CUDA: the CUDA call takes extra scalars
#ifdef VLM_HAVE_CUDA
  if (dev.is_cuda()) {
    cuda::AdamWScalars cs = to_cuda(s);
    cs.max_grad_norm = p.max_grad_norm;
    cs.grad_sum_of_squares = grad_sum_of_squares.data<double>();
    cuda::adamw_step_multi(tensors, cs);
    return;
  }
#endif
  s.grad_scale *= clip_factor(grad_sum_of_squares.data<double>()[0], p.max_grad_norm);
  for (const AdamWTensors& t : tensors) adamw_cpu(t, s);
}

double sum_of_squares(const std::vector<Tensor>& tensors) {
  // The device-side sum, read back at once: the one synchronization.
  const Device dev = tensors.empty() || !tensors.front().defined() ? Device::cpu() : tensors.front().device();
#ifndef VLM_HAVE_CUDA
  if (dev.is_cuda()) no_cuda("sum_of_squares");  // before allocating the result there
#endif
  Tensor out = Tensor::empty(Shape{1}, DType::f64, dev);
  sum_of_squares(out, tensors);
  return HostReadback(out).scalar_f64();
}

void zero_multi(const std::vector<Tensor>& tensors) {
  const char* op = "zero_multi";
  if (tensors.empty()) return;
  const Device dev = tensors.front().device();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    VLM_CHECK(t.defined(), "ops::", op, ": tensors[", i, "] is undefined");
    VLM_CHECK(t.device() == dev, "ops::", op, ": tensors[", i, "] is on ", t.device().to_string(), ", tensors[0] on ",
              dev.to_string());
    VLM_CHECK(t.is_contiguous(), "ops::", op, ": tensors[", i, "] ", t.describe(), " is not contiguous");
  }
  VLM_DISPATCH_CUDA(dev, op, cuda::zero_multi(tensors));
  for (const Tensor& t : tensors) std::memset(t.raw_data(), 0, t.nbytes());
}

void sum_of_squares(Tensor& out, const std::vector<Tensor>& tensors) {
  const char* op = "sum_of_squares";
  check_f64_scalar(op, out);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = str("tensors[", i, "]");
    check_tensor(op, name.c_str(), tensors[i], compute_dtype(op, name.c_str(), tensors[i]), out.device());
  }
  VLM_DISPATCH_CUDA(out.device(), op, cuda::sum_of_squares_into(out, tensors));
  double total = 0.0;
  for (const Tensor& t : tensors) total += cpu::sum_of_squares(t.data<float>(), t.numel());
  out.data<double>()[0] = total;
}

void sum(Tensor& out, const Tensor& x) {
  const char* op = "sum";
  check_f64_scalar(op, out);
  check_tensor(op, "x", x, DType::f32, out.device());
  VLM_DISPATCH_CUDA(out.device(), op, cuda::sum_into(out, x));
  double total = 0.0;
  const float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) total += p[i];
  out.data<double>()[0] = total;
}

}  // namespace vlm::ops
