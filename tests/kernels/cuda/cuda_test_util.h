// Helpers of the CUDA op tests (label gpu): every test compares a CUDA op with the CPU reference op on random inputs.
// For bf16 the CPU op runs on the bf16-rounded inputs (exactly what the GPU sees), so the tolerances only have to
// cover what the GPU does differently: the order of fp32 reductions and bf16 roundings of its results.
// Outputs are NaN-filled device buffers with NaN guard elements on both sides, so an unwritten element fails the
// comparison (NaN never passes) and a write past either end fails the guard check.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "testing/test_util.h"

#define VLM_SKIP_WITHOUT_CUDA() \
  if (!::vlm::cuda_available()) GTEST_SKIP() << "no CUDA device"

namespace vlm::testing {

inline Device gpu() { return Device::cuda(0); }

// The compute dtypes every op is tested with.
inline const std::vector<DType>& compute_dtypes() {
  static const std::vector<DType> kDtypes = {DType::f32, DType::bf16};
  return kDtypes;
}

// bf16 rounding: half the spacing of bf16 values, relative (8 significant bits: spacing 2^-7 in [1, 2)).
constexpr double kBf16HalfUlp = 1.0 / 256;

// The CPU f32 tensor the CUDA op sees when x is stored in `dtype` (bf16: rounded to nearest even).
Tensor rounded(const Tensor& x, DType dtype);
// x (CPU f32) stored in `dtype` on the GPU.
Tensor to_gpu(const Tensor& x, DType dtype);
Tensor gpu_i32(const std::vector<int32_t>& values);
// x (CPU f32) stored in `dtype` on the GPU as a contiguous view that starts `offset` elements into its buffer: with
// an offset that is not a multiple of 16 bytes, the data pointer is misaligned (kernels must take scalar paths).
Tensor to_gpu_at_offset(const Tensor& x, DType dtype, int64_t offset);
// A CPU f32 copy of a tensor of any float dtype on any device.
Tensor to_cpu_f32(const Tensor& t);

// A device output whose elements all start as NaN (or as `init`), with kGuard NaN elements before and after.
class Guarded {
 public:
  static constexpr int64_t kGuard = 64;
  Guarded(const Shape& shape, DType dtype);                 // NaN-filled
  Guarded(const Tensor& init_cpu_f32, DType dtype);         // the values of init (rounded to dtype)
  Tensor& view() { return view_; }                          // what the op writes
  const Tensor& view() const { return view_; }
  ::testing::AssertionResult guards_intact() const;         // the guard elements are still NaN

 private:
  Tensor buffer_, view_;
};

// |actual - expected| <= bound(i, expected_i) for every element, and no NaN/inf in either; the failure names the
// first bad index, its values and the largest error.
::testing::AssertionResult close_within(const Tensor& actual, const Tensor& expected,
                                        const std::function<double(int64_t, double)>& bound);

// The largest finite |x| of an f32 CPU tensor (0 for none).
double max_abs(const Tensor& t);
// close_within with error <= rtol |expected| + rel_max * max|expected| + atol (outputs whose error scales with the
// row, attention's), plus the guard check of actual's buffer.
::testing::AssertionResult close_scaled(const Guarded& actual, const Tensor& expected, double rtol, double rel_max,
                                        double atol);

struct Tolerance {
  double rtol = 0, atol = 0;
};
// all_close of a (device) result against the CPU reference, plus the guard check of its buffer.
::testing::AssertionResult matches(const Guarded& actual, const Tensor& expected, Tolerance tol);

// The tolerance of an output computed in fp32 from identical inputs and stored in `dtype`: f32 -> `f32_tol`;
// bf16 -> the same plus the output's own rounding (kBf16HalfUlp relative, a little slack for ties).
Tolerance output_tolerance(DType dtype, Tolerance f32_tol);

std::string dtype_label(DType dtype);

}  // namespace vlm::testing
