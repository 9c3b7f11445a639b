// The fused_linear family's op boundary: a pre-norm block's projections with their neighbours (the RMSNorm before,
// the SwiGLU after). Each op validates, then on CUDA runs the one-pass GEMV of cuda/gemv.cu when the call has few
// enough rows (a decode step at small batch); everywhere else it is the composition of the ops it fuses
// (rmsnorm_forward, linear_forward, swiglu_packed_forward), so the CPU reference is those ops' references.
#include "kernels/ops.h"
#include "kernels/ops/check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops/check.h

namespace {

// The normalized rows, as rmsnorm_forward stores them.
Tensor normalized(const Tensor& x, const Tensor& norm_w, float eps) {
  Tensor n = temporary(x.shape(), x.dtype(), x.device()), no_rstd;
  rmsnorm_forward(n, no_rstd, x, norm_w, eps);
  return n;
}

// The fused kernel when the call fits it (CUDA, few rows); false: run the composition.
bool fused_gemv([[maybe_unused]] Tensor& y, [[maybe_unused]] const Tensor& x, [[maybe_unused]] const Tensor& norm_w,
                [[maybe_unused]] float eps, [[maybe_unused]] const Tensor& w, [[maybe_unused]] const Tensor& b,
                [[maybe_unused]] bool swiglu) {
#ifdef VLM_HAVE_CUDA
  if (y.device().is_cuda()) return cuda::gemv_forward(y, x, norm_w, eps, w, b, Tensor(), swiglu);
#endif
  return false;
}

}  // namespace

void rmsnorm_linear_forward(Tensor& y, const Tensor& x, const Tensor& norm_w, float eps, const Tensor& w,
                            const Tensor& b) {
  const char* op = "rmsnorm_linear_forward";
  const Device dev = y.device();
  const DType dt = check_norm_linear(op, x, norm_w, w, b, dev);
  VLM_CHECK(y.dtype() == dt || y.dtype() == DType::f32, "ops::", op, ": y is ", y.describe(), ", expected dtype ",
            dtype_name(dt), " or f32");
  check_like(op, "y", y, y.dtype(), dev, with_last_dim(x, w.dim(0)));
  const profile::OpRange range(op, dev);
  if (y.numel() == 0 || fused_gemv(y, x, norm_w, eps, w, b, /*swiglu=*/false)) return;
  const Tensor n = normalized(x, norm_w, eps);
  if (y.dtype() == dt) return linear_forward(y, n, w, b);
  Tensor rounded = temporary(y.shape(), dt, dev);  // the product as the compute dtype stores it, then widened
  linear_forward(rounded, n, w, b);
  cast(y, rounded);
}

void rmsnorm_linear_swiglu_forward(Tensor& y, const Tensor& x, const Tensor& norm_w, float eps, const Tensor& w,
                                   const Tensor& b) {
  const char* op = "rmsnorm_linear_swiglu_forward";
  const Device dev = y.device();
  const DType dt = check_norm_linear(op, x, norm_w, w, b, dev);
  VLM_CHECK(w.dim(0) % 2 == 0, "ops::", op, ": w is ", w.describe(), ", expected [2I, in] (gate rows, then up rows)");
  check_like(op, "y", y, dt, dev, with_last_dim(x, w.dim(0) / 2));
  const profile::OpRange range(op, dev);
  if (y.numel() == 0 || fused_gemv(y, x, norm_w, eps, w, b, /*swiglu=*/true)) return;
  const Tensor n = normalized(x, norm_w, eps);
  Tensor gate_up = temporary(with_last_dim(x, w.dim(0)), dt, dev);
  linear_forward(gate_up, n, w, b);
  swiglu_packed_forward(y, gate_up);
}

}  // namespace vlm::ops
