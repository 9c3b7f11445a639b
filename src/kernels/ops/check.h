// Internal to the op boundary (ops/<family>.cpp): the validation helpers every op runs before it dispatches, and the
// one dispatch point per op. Each helper aborts with a message that names the op and the offending tensor. The
// compute dtype of a call is taken from one of its activations: f32 on the CPU (the reference backend is f32 only),
// f32 or bf16 on CUDA (see the dtype contract in ops.h).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/op_profile.h"

#ifdef VLM_HAVE_CUDA
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_ops.h"
// The dispatch point of an op: on a CUDA device, run `call` (a cuda:: entry of kernels/cuda/cuda_ops.h) and return;
// otherwise fall through to the CPU reference that follows. It opens the op's profile range (op_profile.h), which
// lasts to the end of the enclosing scope, so it must stand at function level, once per function.
#define VLM_DISPATCH_CUDA(device, op, call)                    \
  ::vlm::ops::profile::OpRange vlm_op_profile_range_(op, device); \
  if ((device).is_cuda()) {                                    \
    call;                                                      \
    return;                                                    \
  }                                                            \
  static_cast<void>(0)
#else
// Without CUDA the call is never compiled; a CUDA tensor (which cannot exist in such a build) aborts.
#define VLM_DISPATCH_CUDA(device, op, call)                    \
  ::vlm::ops::profile::OpRange vlm_op_profile_range_(op, device); \
  if ((device).is_cuda()) ::vlm::ops::detail::no_cuda(op);     \
  static_cast<void>(0)
#endif

namespace vlm::ops::detail {

[[noreturn]] inline void no_cuda(const char* op) {
  VLM_FAIL("ops::", op, ": no CUDA implementation in this build yet (configure with -DVLM_CUDA=ON)");
}

// The compute dtype of a call whose activations include `t` (see above).
inline DType compute_dtype(const char* op, const char* name, const Tensor& t) {
  VLM_CHECK(t.defined(), "ops::", op, ": ", name, " is undefined");
  if (t.device().is_cuda()) {
    VLM_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16, "ops::", op, ": ", name, " is ", t.describe(),
              ", expected dtype f32 or bf16");
    return t.dtype();
  }
  VLM_CHECK(t.dtype() == DType::f32, "ops::", op, ": ", name, " is ", t.describe(),
            ", expected dtype f32 (the CPU ops are f32 only; bf16 runs on CUDA)");
  return DType::f32;
}

// `t` must be defined, contiguous, of `dtype` and on `device`.
inline void check_tensor(const char* op, const char* name, const Tensor& t, DType dtype, Device device) {
  VLM_CHECK(t.defined(), "ops::", op, ": ", name, " is undefined");
  VLM_CHECK(t.dtype() == dtype, "ops::", op, ": ", name, " is ", t.describe(), ", expected dtype ", dtype_name(dtype));
  VLM_CHECK(t.device() == device, "ops::", op, ": ", name, " is ", t.describe(), ", expected device ",
            device.to_string());
  VLM_CHECK(t.is_contiguous(), "ops::", op, ": ", name, " is ", t.describe(), " and not contiguous");
}

inline void check_shape(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  VLM_CHECK(t.shape() == shape, "ops::", op, ": ", name, " is ", t.describe(), ", expected shape ", shape.to_string());
}

// A defined tensor of `dtype` and exactly `shape` on `device`.
inline void check_like(const char* op, const char* name, const Tensor& t, DType dtype, Device device,
                       const Shape& shape) {
  check_tensor(op, name, t, dtype, device);
  check_shape(op, name, t, shape);
}

// Same for an optional tensor (an undefined one passes).
inline void check_optional(const char* op, const char* name, const Tensor& t, DType dtype, Device device,
                           const Shape& shape) {
  if (t.defined()) check_like(op, name, t, dtype, device, shape);
}

// q, k, v and their gradients (and RoPE's x): contiguous, or on CUDA also [T, H, D] rows at a larger stride with each
// row's H x D contiguous (column slices of a packed projection, e.g. q = qkv.view({T, H + 2 Hkv, D}).slice(1, 0, H)).
inline void check_rows(const char* op, const char* name, const Tensor& t, DType dt, Device dev) {
  const bool row_strided = dev.is_cuda() && t.defined() && t.ndim() == 3 && t.strides()[2] == 1 &&
                           t.strides()[1] == t.dim(2) && t.strides()[0] >= t.dim(1) * t.dim(2);
  if (!row_strided) return check_tensor(op, name, t, dt, dev);
  VLM_CHECK(t.dtype() == dt, "ops::", op, ": ", name, " is ", t.describe(), ", expected dtype ", dtype_name(dt));
  VLM_CHECK(t.device() == dev, "ops::", op, ": ", name, " is ", t.describe(), ", expected device ", dev.to_string());
}

inline void check_ndim(const char* op, const char* name, const Tensor& t, int ndim) {
  VLM_CHECK(t.ndim() == ndim, "ops::", op, ": ", name, " is ", t.describe(), ", expected ", ndim, "-D");
}

// Checks an i32 index vector of `n` entries (ids, targets, positions, index).
inline void check_i32_vector(const char* op, const char* name, const Tensor& t, Device device, int64_t n) {
  check_tensor(op, name, t, DType::i32, device);
  check_shape(op, name, t, Shape{n});
}

// True when the bytes of a and b (defined, contiguous, on one device) intersect; empty tensors overlap nothing.
inline bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a.raw_data()), pb = reinterpret_cast<uintptr_t>(b.raw_data());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

inline void check_disjoint(const char* op, const char* name_a, const Tensor& a, const char* name_b, const Tensor& b) {
  VLM_CHECK(!overlaps(a, b), "ops::", op, ": ", name_a, " (", a.describe(), ") overlaps ", name_b, " (",
            b.describe(), ")");
}

inline float* f32_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// Rows of a [..., C] activation: the product of all but the last dim.
inline int64_t leading_rows(const Tensor& t) {
  int64_t rows = 1;
  for (int i = 0; i + 1 < t.ndim(); ++i) rows *= t.dim(i);
  return rows;
}

// `like` with its last dim replaced by `last`.
inline Shape with_last_dim(const Tensor& like, int64_t last) {
  Shape s = like.shape();
  s[s.ndim() - 1] = last;
  return s;
}

// A linear layer's operands: x [..., in], w [out, in] (and b [out]) in the compute dtype of x; returns that dtype.
inline DType check_linear(const char* op, const Tensor& x, const Tensor& w, const Tensor& b, Device dev) {
  const DType dt = compute_dtype(op, "x", x);
  check_tensor(op, "x", x, dt, dev);
  check_tensor(op, "w", w, dt, dev);
  check_ndim(op, "w", w, 2);
  VLM_CHECK(x.ndim() >= 2, "ops::", op, ": x is ", x.describe(), ", expected [T, in] (leading dims flatten into T)");
  check_shape(op, "x", x, with_last_dim(x, w.dim(1)));
  check_optional(op, "b", b, dt, dev, Shape{w.dim(0)});
  return dt;
}

// The same with the RMSNorm weight before it: norm_w [in] in the compute dtype.
inline DType check_norm_linear(const char* op, const Tensor& x, const Tensor& norm_w, const Tensor& w, const Tensor& b,
                               Device dev) {
  const DType dt = check_linear(op, x, w, b, dev);
  check_like(op, "norm_w", norm_w, dt, dev, Shape{w.dim(1)});
  return dt;
}

// An uninitialized temporary on `device` for a composite op's intermediate (stream-ordered on CUDA).
inline Tensor temporary(const Shape& shape, DType dtype, Device device) {
#ifdef VLM_HAVE_CUDA
  if (device.is_cuda()) return cuda::scratch(shape, dtype, device);
#endif
  return Tensor::empty(shape, dtype, device);
}

}  // namespace vlm::ops::detail
