// The quant family's op boundary: fp8 E4M3 with one f32 scale per block of 128 elements (kernels/fp8_e4m3.h).
// Validates, then dispatches to cuda/quant.cu or the CPU reference cpu/quant.cpp.
#include "kernels/cpu/cpu_ops.h"
#include "kernels/fp8_e4m3.h"
#include "kernels/ops.h"
#include "kernels/ops/check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops/check.h

namespace {
void check_codes(const char* op, const Tensor& q, const Tensor& scales, const Tensor& x) {
  check_like(op, "q", q, DType::u8, x.device(), Shape{x.numel()});
  check_like(op, "scales", scales, DType::f32, x.device(), Shape{fp8_block_count(x.numel())});
}
}  // namespace

int64_t fp8_block_count(int64_t n) { return (n + fp8::kBlock - 1) / fp8::kBlock; }

void quantize_fp8_blocks(Tensor& q, Tensor& scales, const Tensor& x) {
  const char* op = "quantize_fp8_blocks";
  check_tensor(op, "x", x, compute_dtype(op, "x", x), x.device());
  VLM_CHECK(x.ndim() == 1, "ops::", op, ": x is ", x.describe(), ", expected 1-D");
  check_codes(op, q, scales, x);
  VLM_DISPATCH_CUDA(x.device(), op, cuda::quantize_fp8_blocks(q, scales, x));
  cpu::quantize_fp8_blocks(q.data<uint8_t>(), scales.data<float>(), x.data<float>(), x.numel());
}

void dequantize_fp8_blocks(Tensor& x, const Tensor& q, const Tensor& scales) {
  const char* op = "dequantize_fp8_blocks";
  check_tensor(op, "x", x, compute_dtype(op, "x", x), x.device());
  VLM_CHECK(x.ndim() == 1, "ops::", op, ": x is ", x.describe(), ", expected 1-D");
  check_codes(op, q, scales, x);
  VLM_DISPATCH_CUDA(x.device(), op, cuda::dequantize_fp8_blocks(x, q, scales));
  cpu::dequantize_fp8_blocks(x.data<float>(), q.data<uint8_t>(), scales.data<float>(), x.numel());
}

}  // namespace vlm::ops
