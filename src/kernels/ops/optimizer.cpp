// The optimizer family's op boundary: AdamW (one tensor, or many in a few fused launches, optionally clipped by a
// gradient norm read on the device), zero_multi and the fp64 sums (of squares, for the gradient norm; plain, for the
// loss). Each op validates, then dispatches to cuda/optimizer.cu or the CPU reference in cpu/optimizer.cpp.
#include "kernels/ops.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/adamw_scalars.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops/check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops/check.h

namespace {
void check_adamw_settings(const char* op, const AdamWSettings& s, int64_t step) {
  VLM_CHECK(step >= 1, "ops::", op, ": step ", step, " must be >= 1 (1-based, for the bias correction)");
  VLM_CHECK(s.beta1 >= 0.f && s.beta1 < 1.f && s.beta2 >= 0.f && s.beta2 < 1.f, "ops::", op, ": betas (", s.beta1, ", ",
            s.beta2, ") must lie in [0, 1)");
}

// One tensor set: param, grad, m, v f32 of one shape on `dev`; param_bf16 (optional) bf16 of that shape.
void check_adamw_tensors(const char* op, const AdamWTensors& t, Device dev) {
  check_tensor(op, "param", t.param, DType::f32, dev);
  check_like(op, "grad", t.grad, DType::f32, dev, t.param.shape());
  check_like(op, "m", t.m, DType::f32, dev, t.param.shape());
  check_like(op, "v", t.v, DType::f32, dev, t.param.shape());
  check_optional(op, "param_bf16", t.param_bf16, DType::bf16, dev, t.param.shape());
}

// The kernels' scalars of one step, filled here alone for the CPU and the CUDA kernel: the bias corrections computed
// in double; with grad_sum_of_squares defined, the clipping limit and the sum's address (read by the kernel).
AdamWScalars adamw_scalars(const AdamWSettings& s, int64_t step, float grad_scale, const Tensor& grad_sum_of_squares) {
  const double t = static_cast<double>(step);
  AdamWScalars k{s.lr,
                 s.beta1,
                 s.beta2,
                 s.eps,
                 s.weight_decay,
                 grad_scale,
                 static_cast<float>(1.0 - std::pow(static_cast<double>(s.beta1), t)),
                 static_cast<float>(1.0 - std::pow(static_cast<double>(s.beta2), t))};
  if (grad_sum_of_squares.defined()) {
    k.max_grad_norm = s.grad_clip;
    k.grad_sum_of_squares = grad_sum_of_squares.data<double>();
  }
  return k;
}

void adamw_cpu(const AdamWTensors& t, const AdamWScalars& k) {
  cpu::adamw_step(t.param.data<float>(), t.grad.data<float>(), t.m.data<float>(), t.v.data<float>(), t.param.numel(),
                  k);
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
}  // namespace

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWSettings& s, int64_t step,
                float grad_scale) {
  Tensor none;
  adamw_step(param, grad, m, v, s, step, grad_scale, none);
}

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWSettings& s, int64_t step,
                float grad_scale, Tensor& param_bf16) {
  const char* op = "adamw_step";
  const AdamWTensors t{param, grad, m, v, param_bf16};
  check_adamw_tensors(op, t, param.device());
  check_adamw_settings(op, s, step);
  const AdamWScalars k = adamw_scalars(s, step, grad_scale, Tensor());
  VLM_DISPATCH_CUDA(param.device(), op, cuda::adamw_step_multi({t}, k));
  adamw_cpu(t, k);
}

void adamw_step_multi(const std::vector<AdamWTensors>& tensors, const AdamWSettings& s, int64_t step,
                      float grad_scale) {
  const char* op = "adamw_step_multi";
  check_adamw_settings(op, s, step);
  if (tensors.empty()) return;
  const Device dev = tensors.front().param.device();
  check_adamw_list(op, tensors, dev);
  const AdamWScalars k = adamw_scalars(s, step, grad_scale, Tensor());
  VLM_DISPATCH_CUDA(dev, op, cuda::adamw_step_multi(tensors, k));
  for (const AdamWTensors& t : tensors) adamw_cpu(t, k);
}

void adamw_step_multi(const std::vector<AdamWTensors>& tensors, const AdamWSettings& s, int64_t step,
                      const Tensor& grad_sum_of_squares) {
  const char* op = "adamw_step_multi";
  check_adamw_settings(op, s, step);
  if (tensors.empty()) return;
  const Device dev = tensors.front().param.device();
  check_like(op, "grad_sum_of_squares", grad_sum_of_squares, DType::f64, dev, Shape{1});
  check_adamw_list(op, tensors, dev);
  const AdamWScalars k = adamw_scalars(s, step, 1.f, grad_sum_of_squares);
  VLM_DISPATCH_CUDA(dev, op, cuda::adamw_step_multi(tensors, k));
  for (const AdamWTensors& t : tensors) adamw_cpu(t, k);
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
