// The RoPE family's op boundary: rotary position embedding in place on [T, H, D], forward and backward. Each op
// validates, then dispatches to cuda/rope.cu or the CPU reference in cpu/rope.cpp.
#include "kernels/ops.h"

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops/check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops/check.h

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
