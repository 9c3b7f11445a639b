// The GEMM family's op boundary: matmul, matmul_batched and the linear layers (plain, with the residual add, with the
// GELU, and their backward). Each op validates shapes, dtypes, contiguity and devices (aborting with the op and the
// tensor named), then dispatches: cuda::* of cuda/gemm.cpp (cuBLASLt) on CUDA, cpu/gemm.cpp (OpenBLAS) on the CPU.
#include "kernels/ops.h"

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops/check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops/check.h

namespace {

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


}  // namespace

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

}  // namespace vlm::ops
