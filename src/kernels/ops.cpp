// The op boundary, part 1 (supports, cast, GEMM, elementwise, normalization, activations, RoPE; the rest is in
// ops_sequence.cpp and ops_packed.cpp, and the chunked LM-head loss, a composition of ops, in ops_lm_head.cpp):
// each function validates shapes, dtypes, contiguity and devices (aborting with a message that names the op and the
// offending tensor), then dispatches on the device of its output. CPU runs the reference in cpu/ (f32 only); CUDA
// runs kernels/cuda/ (f32 or bf16 compute dtype, see ops.h) through the one VLM_DISPATCH_CUDA line of each op.
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>

#include "core/env.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops_check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops_check.h

namespace {

// Every op in ops.h, by name, for supports().
constexpr const char* kOps[] = {"cast",
                                "matmul",
                                "matmul_batched",
                                "linear_forward",
                                "linear_add_forward",
                                "linear_backward",
                                "linear_gelu_forward",
                                "linear_dgelu_backward",
                                "fill",
                                "scale",
                                "add",
                                "add_inplace",
                                "add_rows_broadcast",
                                "add_rows_broadcast_backward",
                                "layernorm_forward",
                                "layernorm_backward",
                                "rmsnorm_forward",
                                "rmsnorm_backward",
                                "add_layernorm_forward",
                                "add_layernorm_backward",
                                "add_rmsnorm_forward",
                                "add_rmsnorm_backward",
                                "gelu_tanh_forward",
                                "gelu_tanh_backward",
                                "swiglu_forward",
                                "swiglu_backward",
                                "rope_forward",
                                "rope_backward",
                                "qkv_split_forward",
                                "qkv_split_backward",
                                "swiglu_packed_forward",
                                "swiglu_packed_backward",
                                "attention_forward",
                                "attention_backward",
                                "check_cu_seqlens",
                                "cross_entropy_forward",
                                "cross_entropy_backward",
                                "cross_entropy_forward_backward",
                                "lm_head_cross_entropy",
                                "embedding_forward",
                                "embedding_backward",
                                "image_to_patches",
                                "image_to_patches_backward",
                                "pixel_shuffle_forward",
                                "pixel_shuffle_backward",
                                "scatter_rows",
                                "gather_rows",
                                "adamw_step",
                                "adamw_step_multi",
                                "sum_of_squares",
                                "sum",
                                "zero_multi"};

// Shared validation of matmul / matmul_batched: returns {m, n, k} of the (per-batch) product, whose operands are
// dims [first, first + 2) of out, a and b. a and b share the compute dtype; out is in it or f32.
struct GemmDims {
  int64_t m, n, k;
};
GemmDims check_gemm(const char* op, const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                    int first) {
  const Device dev = out.device();
  const DType dt = compute_dtype(op, "a", a);
  VLM_CHECK(out.defined(), "ops::", op, ": out is undefined");
  VLM_CHECK(out.dtype() == dt || out.dtype() == DType::f32, "ops::", op, ": out is ", out.describe(),
            ", expected dtype ", dtype_name(dt), " or f32");
  check_tensor(op, "out", out, out.dtype(), dev);
  check_tensor(op, "a", a, dt, dev);
  check_tensor(op, "b", b, dt, dev);
  check_ndim(op, "out", out, first + 2);
  check_ndim(op, "a", a, first + 2);
  check_ndim(op, "b", b, first + 2);
  const int64_t m = out.dim(first), n = out.dim(first + 1);
  const int64_t k = a.dim(trans_a ? first : first + 1);
  VLM_CHECK(a.dim(trans_a ? first + 1 : first) == m, "ops::", op, ": a is ", a.describe(),
            (trans_a ? " (transposed)" : ""), " but out is ", out.describe());
  const int64_t b_k = b.dim(trans_b ? first + 1 : first), b_n = b.dim(trans_b ? first : first + 1);
  VLM_CHECK(b_k == k && b_n == n, "ops::", op, ": b is ", b.describe(), (trans_b ? " (transposed)" : ""), ", a is ",
            a.describe(), (trans_a ? " (transposed)" : ""), ", out is ", out.describe());
  VLM_CHECK(out.numel() == 0 || (out.raw_data() != a.raw_data() && out.raw_data() != b.raw_data()), "ops::", op,
            ": out must not alias a or b");
  return {m, n, k};
}

// x [..., in], w [out, in] (and b [out]) in the compute dtype of x; returns that dtype.
DType check_linear(const char* op, const Tensor& x, const Tensor& w, const Tensor& b, Device dev) {
  const DType dt = compute_dtype(op, "x", x);
  check_tensor(op, "x", x, dt, dev);
  check_tensor(op, "w", w, dt, dev);
  check_ndim(op, "w", w, 2);
  VLM_CHECK(x.ndim() >= 2, "ops::", op, ": x is ", x.describe(), ", expected [T, in] (leading dims flatten into T)");
  check_shape(op, "x", x, with_last_dim(x, w.dim(1)));
  check_optional(op, "b", b, dt, dev, Shape{w.dim(0)});
  return dt;
}

}  // namespace

bool supports(const std::string& op, Device device) {
#ifndef VLM_HAVE_CUDA
  if (device.is_cuda()) return false;
#endif
  return std::any_of(std::begin(kOps), std::end(kOps), [&](const char* name) { return op == name; });
}

// ---- precision ---------------------------------------------------------------------------------------------

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

// ---- GEMM --------------------------------------------------------------------------------------------------

void set_gemm_autotune(bool on) {
#ifdef VLM_HAVE_CUDA
  cuda::set_gemm_autotune(on);
#else
  (void)on;
#endif
}

void use_compute_stream(Device device) {
#ifdef VLM_HAVE_CUDA
  static const bool dedicated = env_int("VLM_MAIN_STREAM", 0, 0, 1) == 1;
  if (device.is_cuda() && dedicated) cuda::set_current_stream(device.index, cuda::dedicated_stream(device.index));
#else
  (void)device;
#endif
}

WeightGradOverlap::WeightGradOverlap(Device device) : device_(device) {
#ifdef VLM_HAVE_CUDA
  if (device_.is_cuda()) cuda::weight_grad_overlap_begin(device_);
#endif
}

WeightGradOverlap::~WeightGradOverlap() {
#ifdef VLM_HAVE_CUDA
  if (device_.is_cuda()) cuda::weight_grad_overlap_end(device_);
#endif
}

void set_attention_deterministic(bool on) {
#ifdef VLM_HAVE_CUDA
  cuda::set_attention_deterministic(on);
#else
  (void)on;
#endif
}

void set_attention_flash(bool on) {
#ifdef VLM_HAVE_CUDA
  cuda::set_attention_flash(on);
#else
  (void)on;
#endif
}

bool attention_flash() {
#ifdef VLM_HAVE_CUDA
  return cuda::attention_flash();
#else
  return true;
#endif
}

void set_deterministic(bool on) {
  set_attention_deterministic(on);
  set_gemm_autotune(!on);
}

bool attention_deterministic() {
#ifdef VLM_HAVE_CUDA
  return cuda::attention_deterministic();
#else
  return true;  // the CPU kernels always are
#endif
}

void matmul(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta) {
  const GemmDims d = check_gemm("matmul", out, a, b, trans_a, trans_b, 0);
  VLM_PROFILE_TAG(out.dim(0), "x", out.dim(1), "x", trans_a ? a.dim(0) : a.dim(1));
  VLM_DISPATCH_CUDA(out.device(), "matmul", cuda::matmul(out, a, b, trans_a, trans_b, alpha, beta, false));
  cpu::gemm(out.data<float>(), a.data<float>(), b.data<float>(), d.m, d.n, d.k, trans_a, trans_b, alpha, beta);
}

void matmul_batched(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
                    float beta) {
  const char* op = "matmul_batched";
  const GemmDims d = check_gemm(op, out, a, b, trans_a, trans_b, 1);
  VLM_CHECK(a.dim(0) == out.dim(0) && b.dim(0) == out.dim(0), "ops::", op, ": batch sizes differ: out ", out.describe(),
            ", a ", a.describe(), ", b ", b.describe());
  VLM_DISPATCH_CUDA(out.device(), op, cuda::matmul(out, a, b, trans_a, trans_b, alpha, beta, true));
  cpu::gemm_batched(out.data<float>(), a.data<float>(), b.data<float>(), out.dim(0), d.m, d.n, d.k, trans_a, trans_b,
                    alpha, beta);
}

void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b) {
  const char* op = "linear_forward";
  const Device dev = y.device();
  const DType dt = check_linear(op, x, w, b, dev);
  check_like(op, "y", y, dt, dev, with_last_dim(x, w.dim(0)));
  VLM_PROFILE_TAG(leading_rows(x), "x", w.dim(0), "x", w.dim(1));
  VLM_DISPATCH_CUDA(dev, op, cuda::linear_forward(y, x, w, b));
  cpu::linear_forward(y.data<float>(), x.data<float>(), w.data<float>(), f32_or_null(b), leading_rows(x), w.dim(1),
                      w.dim(0));
}

void linear_add_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& residual) {
  const char* op = "linear_add_forward";
  const Device dev = y.device();
  const DType dt = check_linear(op, x, w, b, dev);
  check_like(op, "y", y, dt, dev, with_last_dim(x, w.dim(0)));
  check_like(op, "residual", residual, dt, dev, y.shape());
  VLM_CHECK(y.numel() == 0 || (y.raw_data() != residual.raw_data() && y.raw_data() != x.raw_data()), "ops::", op,
            ": y must not alias residual or x");
  VLM_PROFILE_TAG(leading_rows(x), "x", w.dim(0), "x", w.dim(1));
  VLM_DISPATCH_CUDA(dev, op, cuda::linear_add_forward(y, x, w, b, residual));
  cpu::linear_forward(y.data<float>(), x.data<float>(), w.data<float>(), f32_or_null(b), leading_rows(x), w.dim(1),
                      w.dim(0));
  cpu::add_inplace(y.data<float>(), residual.data<float>(), y.numel());
}

void linear_gelu_forward(Tensor& y, Tensor& pre, const Tensor& x, const Tensor& w, const Tensor& b) {
  const char* op = "linear_gelu_forward";
  const Device dev = y.device();
  const DType dt = check_linear(op, x, w, b, dev);
  check_like(op, "y", y, dt, dev, with_last_dim(x, w.dim(0)));
  check_like(op, "pre", pre, dt, dev, y.shape());
  VLM_CHECK(y.numel() == 0 || y.raw_data() != pre.raw_data(), "ops::", op, ": y must not alias pre");
  VLM_PROFILE_TAG(leading_rows(x), "x", w.dim(0), "x", w.dim(1));
  VLM_DISPATCH_CUDA(dev, op, cuda::linear_gelu_forward(y, pre, x, w, b));
  cpu::linear_forward(pre.data<float>(), x.data<float>(), w.data<float>(), f32_or_null(b), leading_rows(x), w.dim(1),
                      w.dim(0));
  cpu::gelu_tanh_forward(y.data<float>(), pre.data<float>(), y.numel());
}

void linear_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w) {
  const char* op = "linear_backward";
  const Device dev = dy.device();
  const DType dt = compute_dtype(op, "dy", dy);
  check_tensor(op, "dy", dy, dt, dev);
  const Tensor none;
  check_linear(op, x, w, none, dev);
  check_tensor(op, "x", x, dt, dev);
  const int64_t out = w.dim(0), in = w.dim(1);
  check_shape(op, "dy", dy, with_last_dim(x, out));
  check_optional(op, "dx", dx, dt, dev, x.shape());
  check_optional(op, "dw", dw, DType::f32, dev, w.shape());
  check_optional(op, "db", db, DType::f32, dev, Shape{out});
  VLM_PROFILE_TAG(leading_rows(x), "x", out, "x", in);
  VLM_DISPATCH_CUDA(dev, op, cuda::linear_backward(dx, dw, db, dy, x, w));
  cpu::linear_backward(f32_or_null(dx), f32_or_null(dw), f32_or_null(db), dy.data<float>(), x.data<float>(),
                       w.data<float>(), leading_rows(x), in, out);
}

void linear_dgelu_backward(Tensor& dpre, const Tensor& dy, const Tensor& w, const Tensor& pre) {
  const char* op = "linear_dgelu_backward";
  const Device dev = dy.device();
  const Tensor none;
  const DType dt = check_linear(op, pre, w, none, dev);
  check_like(op, "dy", dy, dt, dev, with_last_dim(pre, w.dim(0)));
  check_like(op, "dpre", dpre, dt, dev, pre.shape());
  VLM_CHECK(dpre.numel() == 0 || (dpre.raw_data() != dy.raw_data() && dpre.raw_data() != pre.raw_data()), "ops::",
            op, ": dpre must not alias dy or pre");
  const int64_t rows = leading_rows(pre), out = w.dim(0), in = w.dim(1);
  VLM_PROFILE_TAG(rows, "x", out, "x", in);
  VLM_DISPATCH_CUDA(dev, op, cuda::linear_dgelu_backward(dpre, dy, w, pre));
  cpu::linear_backward(dpre.data<float>(), nullptr, nullptr, dy.data<float>(), nullptr, w.data<float>(), rows, in, out);
  cpu::gelu_tanh_backward(dpre.data<float>(), dpre.data<float>(), pre.data<float>(), dpre.numel());
}

// ---- elementwise -------------------------------------------------------------------------------------------

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

// ---- normalization -----------------------------------------------------------------------------------------

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

// ---- activations -------------------------------------------------------------------------------------------

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

// ---- rotary position embedding -----------------------------------------------------------------------------

namespace {
void check_rope(const char* op, const Tensor& x, const Tensor& positions) {
  check_rows(op, "x", x, compute_dtype(op, "x", x), x.device());
  check_ndim(op, "x", x, 3);
  VLM_CHECK(x.dim(2) % 2 == 0, "ops::", op, ": x is ", x.describe(), ", head dim must be even");
  check_i32_vector(op, "positions", positions, x.device(), x.dim(0));
}
}  // namespace

void rope_forward(Tensor& x, const Tensor& positions, float theta) {
  check_rope("rope_forward", x, positions);
  VLM_DISPATCH_CUDA(x.device(), "rope_forward", cuda::rope(x, positions, theta, false));
  cpu::rope_forward(x.data<float>(), positions.data<int32_t>(), x.dim(0), x.dim(1), x.dim(2), theta);
}

void rope_backward(Tensor& dx, const Tensor& positions, float theta) {
  check_rope("rope_backward", dx, positions);
  VLM_DISPATCH_CUDA(dx.device(), "rope_backward", cuda::rope(dx, positions, theta, true));
  cpu::rope_backward(dx.data<float>(), positions.data<int32_t>(), dx.dim(0), dx.dim(1), dx.dim(2), theta);
}

}  // namespace vlm::ops
