// The elementwise family's op boundary: cast, fill, scale, add and the row-broadcast add (learned positions) with its
// backward. Each op validates, then dispatches to cuda/elementwise.cu or the CPU reference in cpu/elementwise.cpp
// (cast converts inline: the one op that reads or writes bf16 on the CPU).
#include "kernels/ops.h"

#include <cstdint>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops/check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops/check.h

void cast(Tensor& out, const Tensor& in) {
  const char* op = "cast";
  auto check_float = [&](const char* name, const Tensor& t) {
    VLM_CHECK(t.defined(), "ops::cast: ", name, " is undefined");
    VLM_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16, "ops::cast: ", name, " is ", t.describe(),
              ", expected dtype f32 or bf16");
  };
  check_float("out", out);
  check_float("in", in);
  check_tensor(op, "out", out, out.dtype(), out.device());
  check_like(op, "in", in, in.dtype(), out.device(), out.shape());
  VLM_DISPATCH_CUDA(out.device(), op, cuda::cast(out, in));
  const int64_t n = out.numel();
  if (in.dtype() == out.dtype()) {
    if (out.raw_data() != in.raw_data()) out.copy_from(in);
  } else if (out.dtype() == DType::bf16) {
    const float* src = in.data<float>();
    auto* dst = static_cast<uint16_t*>(out.raw_data());
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
  } else {
    const auto* src = static_cast<const uint16_t*>(in.raw_data());
    float* dst = out.data<float>();
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
  }
}

void fill(Tensor& x, float value) {
  check_tensor("fill", "x", x, compute_dtype("fill", "x", x), x.device());
  VLM_DISPATCH_CUDA(x.device(), "fill", cuda::fill(x, value));
  cpu::fill(x.data<float>(), x.numel(), value);
}

void scale(Tensor& x, float s) {
  check_tensor("scale", "x", x, compute_dtype("scale", "x", x), x.device());
  VLM_DISPATCH_CUDA(x.device(), "scale", cuda::scale(x, s));
  cpu::scale(x.data<float>(), x.numel(), s);
}

void add(Tensor& out, const Tensor& a, const Tensor& b) {
  const DType dt = compute_dtype("add", "out", out);
  check_tensor("add", "out", out, dt, out.device());
  check_like("add", "a", a, dt, out.device(), out.shape());
  check_like("add", "b", b, dt, out.device(), out.shape());
  VLM_DISPATCH_CUDA(out.device(), "add", cuda::add(out, a, b));
  cpu::add(out.data<float>(), a.data<float>(), b.data<float>(), out.numel());
}

void add_inplace(Tensor& a, const Tensor& b) {
  const DType dt = compute_dtype("add_inplace", "a", a);
  check_tensor("add_inplace", "a", a, dt, a.device());
  check_like("add_inplace", "b", b, dt, a.device(), a.shape());
  VLM_DISPATCH_CUDA(a.device(), "add_inplace", cuda::add_inplace(a, b));
  cpu::add_inplace(a.data<float>(), b.data<float>(), a.numel());
}

namespace {
// x [B * P, C] against pos [P, C] (pos in `pos_dtype`): returns B.
int64_t check_row_broadcast(const char* op, const char* x_name, const Tensor& x, const char* pos_name,
                            const Tensor& pos, DType pos_dtype) {
  check_tensor(op, pos_name, pos, pos_dtype, x.device());
  check_ndim(op, x_name, x, 2);
  check_ndim(op, pos_name, pos, 2);
  const int64_t rows = pos.dim(0);
  VLM_CHECK(x.dim(1) == pos.dim(1) && (rows > 0 ? x.dim(0) % rows == 0 : x.dim(0) == 0), "ops::", op, ": ", x_name,
            " is ", x.describe(), ", which is not a whole number of blocks of ", pos_name, " ", pos.describe());
  return rows > 0 ? x.dim(0) / rows : 0;
}
}  // namespace

void add_rows_broadcast(Tensor& x, const Tensor& pos) {
  const char* op = "add_rows_broadcast";
  const DType dt = compute_dtype(op, "x", x);
  check_tensor(op, "x", x, dt, x.device());
  const int64_t blocks = check_row_broadcast(op, "x", x, "pos", pos, dt);
  VLM_DISPATCH_CUDA(x.device(), op, cuda::add_rows_broadcast(x, pos, blocks));
  cpu::add_rows_broadcast(x.data<float>(), pos.data<float>(), blocks, pos.dim(0), pos.dim(1));
}

void add_rows_broadcast_backward(Tensor& dpos, const Tensor& dx) {
  const char* op = "add_rows_broadcast_backward";
  check_tensor(op, "dpos", dpos, DType::f32, dpos.device());
  check_tensor(op, "dx", dx, compute_dtype(op, "dx", dx), dpos.device());
  const int64_t blocks = check_row_broadcast(op, "dx", dx, "dpos", dpos, DType::f32);
  VLM_DISPATCH_CUDA(dpos.device(), op, cuda::add_rows_broadcast_backward(dpos, dx, blocks));
  cpu::add_rows_broadcast_backward(dpos.data<float>(), dx.data<float>(), blocks, dpos.dim(0), dpos.dim(1));
}

}  // namespace vlm::ops
