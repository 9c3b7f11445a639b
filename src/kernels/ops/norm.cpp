// The norm family's op boundary: layernorm and rmsnorm, plain and fused with the residual add, forward and backward.
// Each op validates, then dispatches to cuda/norm.cu or the CPU reference in cpu/norm.cpp.
#include "kernels/ops.h"

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops/check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops/check.h

namespace {
// x [..., C] (compute dtype `dt`) with w [C]: returns C.
int64_t check_norm_input(const char* op, const char* x_name, const Tensor& x, const Tensor& w, DType dt, Device dev) {
  check_tensor(op, x_name, x, dt, dev);
  VLM_CHECK(x.ndim() >= 1, "ops::", op, ": ", x_name, " is ", x.describe(), ", expected [T, C]");
  const int64_t cols = x.dim(-1);
  check_like(op, "w", w, dt, dev, Shape{cols});
  return cols;
}
// Per-row f32 statistics (mean, rstd) of `rows` values; optional unless `required`.
void check_row_stat(const char* op, const char* name, const Tensor& t, Device dev, int64_t rows, bool required) {
  if (!required && !t.defined()) return;
  check_tensor(op, name, t, DType::f32, dev);
  VLM_CHECK(t.numel() == rows, "ops::", op, ": ", name, " is ", t.describe(), ", expected ", rows,
            " values (one per row)");
}

// The forward of layernorm (b and mean used) or rmsnorm, with the residual add when `residual` is defined.
void norm_forward(const char* op, bool layer, Tensor& h, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x,
                  const Tensor& residual, const Tensor& w, const Tensor& b, float eps) {
  const Device dev = y.device();
  const DType dt = compute_dtype(op, "x", x);
  const int64_t cols = check_norm_input(op, "x", x, w, dt, dev);
  check_like(op, "y", y, dt, dev, x.shape());
  check_optional(op, "b", b, dt, dev, Shape{cols});
  const int64_t rows = leading_rows(x);
  check_row_stat(op, "mean", mean, dev, rows, false);
  check_row_stat(op, "rstd", rstd, dev, rows, false);
  if (residual.defined()) {
    check_like(op, "residual", residual, dt, dev, x.shape());
    check_like(op, "h", h, dt, dev, x.shape());
    VLM_CHECK(y.numel() == 0 || (y.raw_data() != h.raw_data() && y.raw_data() != x.raw_data() &&
                                 y.raw_data() != residual.raw_data()),
              "ops::", op, ": y must not alias h, x or residual");
  }
  VLM_DISPATCH_CUDA(dev, op,
                    layer ? cuda::layernorm_forward(h, y, mean, rstd, x, residual, w, b, eps)
                          : cuda::rmsnorm_forward(h, y, rstd, x, residual, w, eps));
  const Tensor& src = residual.defined() ? h : x;
  if (residual.defined()) cpu::add(h.data<float>(), x.data<float>(), residual.data<float>(), h.numel());
  if (layer) {
    cpu::layernorm_forward(y.data<float>(), f32_or_null(mean), f32_or_null(rstd), src.data<float>(), w.data<float>(),
                           f32_or_null(b), rows, cols, eps);
  } else {
    cpu::rmsnorm_forward(y.data<float>(), f32_or_null(rstd), src.data<float>(), w.data<float>(), rows, cols, eps);
  }
}

// The backward of layernorm (db, mean used) or rmsnorm; with `dres` defined, dx = norm grad + dres (dx required).
void norm_backward(const char* op, bool layer, Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy,
                   const Tensor& dres, const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  const Device dev = dy.device();
  const DType dt = compute_dtype(op, "dy", dy);
  const char* x_name = dres.defined() ? "h" : "x";
  const int64_t cols = check_norm_input(op, x_name, x, w, dt, dev);
  check_like(op, "dy", dy, dt, dev, x.shape());
  const int64_t rows = leading_rows(x);
  if (layer) check_row_stat(op, "mean", mean, dev, rows, true);
  check_row_stat(op, "rstd", rstd, dev, rows, true);
  check_optional(op, dres.defined() ? "dh" : "dx", dx, dt, dev, x.shape());
  check_optional(op, "dw", dw, DType::f32, dev, Shape{cols});
  check_optional(op, "db", db, DType::f32, dev, Shape{cols});
  if (dres.defined()) {
    check_like(op, "dh_next", dres, dt, dev, x.shape());
    check_like(op, "dh", dx, dt, dev, x.shape());
  }
  VLM_DISPATCH_CUDA(dev, op,
                    layer ? cuda::layernorm_backward(dx, dw, db, dy, dres, x, w, mean, rstd)
                          : cuda::rmsnorm_backward(dx, dw, dy, dres, x, w, rstd));
  // With dres, the norm's dx goes to a temporary first: dx may alias dres.
  Tensor norm_dx = dres.defined() ? Tensor::empty(x.shape(), DType::f32) : dx;
  if (layer) {
    cpu::layernorm_backward(f32_or_null(norm_dx), f32_or_null(dw), f32_or_null(db), dy.data<float>(), x.data<float>(),
                            w.data<float>(), mean.data<float>(), rstd.data<float>(), rows, cols);
  } else {
    cpu::rmsnorm_backward(f32_or_null(norm_dx), f32_or_null(dw), dy.data<float>(), x.data<float>(), w.data<float>(),
                          rstd.data<float>(), rows, cols);
  }
  if (dres.defined()) cpu::add(dx.data<float>(), norm_dx.data<float>(), dres.data<float>(), dx.numel());
}
}  // namespace

void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& b,
                       float eps) {
  Tensor none;
  norm_forward("layernorm_forward", true, none, y, mean, rstd, x, none, w, b, eps);
}

void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& mean, const Tensor& rstd) {
  const Tensor none;
  norm_backward("layernorm_backward", true, dx, dw, db, dy, none, x, w, mean, rstd);
}

void rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps) {
  Tensor none, no_mean;
  norm_forward("rmsnorm_forward", false, none, y, no_mean, rstd, x, none, w, none, eps);
}

void rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd) {
  Tensor none;
  norm_backward("rmsnorm_backward", false, dx, dw, none, dy, none, x, w, none, rstd);
}

void add_layernorm_forward(Tensor& h, Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& residual,
                           const Tensor& w, const Tensor& b, float eps) {
  const char* op = "add_layernorm_forward";
  VLM_CHECK(residual.defined() && h.defined(), "ops::", op, ": residual and h are required");
  norm_forward(op, true, h, y, mean, rstd, x, residual, w, b, eps);
}

void add_rmsnorm_forward(Tensor& h, Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& residual, const Tensor& w,
                         float eps) {
  const char* op = "add_rmsnorm_forward";
  VLM_CHECK(residual.defined() && h.defined(), "ops::", op, ": residual and h are required");
  Tensor no_mean, no_bias;
  norm_forward(op, false, h, y, no_mean, rstd, x, residual, w, no_bias, eps);
}

void add_layernorm_backward(Tensor& dh, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& dh_next,
                            const Tensor& h, const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  const char* op = "add_layernorm_backward";
  VLM_CHECK(dh_next.defined() && dh.defined(), "ops::", op, ": dh and dh_next are required");
  norm_backward(op, true, dh, dw, db, dy, dh_next, h, w, mean, rstd);
}

void add_rmsnorm_backward(Tensor& dh, Tensor& dw, const Tensor& dy, const Tensor& dh_next, const Tensor& h,
                          const Tensor& w, const Tensor& rstd) {
  const char* op = "add_rmsnorm_backward";
  VLM_CHECK(dh_next.defined() && dh.defined(), "ops::", op, ": dh and dh_next are required");
  Tensor no_db, no_mean;
  norm_backward(op, false, dh, dw, no_db, dy, dh_next, h, w, no_mean, rstd);
}

}  // namespace vlm::ops
