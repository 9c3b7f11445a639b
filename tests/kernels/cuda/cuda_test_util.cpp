// Helpers of the CUDA op tests (see cuda_test_util.h).
#include "cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/ops.h"

namespace vlm::testing {

Tensor rounded(const Tensor& x, DType dtype) { return dtype == DType::f32 ? x.clone() : x.to(dtype).to(DType::f32); }

Tensor to_gpu(const Tensor& x, DType dtype) { return x.to(dtype).to(gpu()); }

Tensor gpu_i32(const std::vector<int32_t>& values) {
  return Tensor::from_vector(values, Shape{static_cast<int64_t>(values.size())}).to(gpu());
}

Tensor to_cpu_f32(const Tensor& t) { return t.to(Device::cpu()).to(DType::f32); }

Tensor to_gpu_at_offset(const Tensor& x, DType dtype, int64_t offset) {
  const int64_t n = x.numel();
  Tensor host = Tensor::zeros(Shape{offset + n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) host.data<float>()[offset + i] = x.data<float>()[i];
  return to_gpu(host, dtype).slice(0, offset, offset + n).view(x.shape());
}

namespace {
// A CPU f32 buffer of `n + 2 kGuard` elements: NaN guards around `middle` (or NaN when middle is undefined).
Tensor guarded_host(int64_t n, const Tensor& middle) {
  Tensor host = Tensor::full(Shape{n + 2 * Guarded::kGuard}, std::numeric_limits<float>::quiet_NaN());
  if (middle.defined())
    for (int64_t i = 0; i < n; ++i) host.data<float>()[Guarded::kGuard + i] = middle.data<float>()[i];
  return host;
}

Tensor middle_view(const Tensor& buffer, const Shape& shape) {
  return buffer.slice(0, Guarded::kGuard, Guarded::kGuard + shape.numel()).view(shape);
}
}  // namespace

Guarded::Guarded(const Shape& shape, DType dtype) {
  buffer_ = to_gpu(guarded_host(shape.numel(), Tensor()), dtype);
  view_ = middle_view(buffer_, shape);
}

Guarded::Guarded(const Tensor& init_cpu_f32, DType dtype) {
  buffer_ = to_gpu(guarded_host(init_cpu_f32.numel(), init_cpu_f32), dtype);
  view_ = middle_view(buffer_, init_cpu_f32.shape());
}

::testing::AssertionResult Guarded::guards_intact() const {
  const Tensor host = to_cpu_f32(buffer_);
  const int64_t n = host.numel();
  for (int64_t i = 0; i < n; ++i) {
    if (i == kGuard) i = n - kGuard;  // skip the middle
    if (!std::isnan(host.data<float>()[i]))
      return ::testing::AssertionFailure() << "guard element " << (i < kGuard ? i - kGuard : i - (n - kGuard))
                                           << (i < kGuard ? " (before the output)" : " (after the output)")
                                           << " was written: " << host.data<float>()[i];
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult close_within(const Tensor& actual_in, const Tensor& expected_in,
                                        const std::function<double(int64_t, double)>& bound) {
  if (actual_in.shape() != expected_in.shape())
    return ::testing::AssertionFailure() << "shape " << actual_in.shape().to_string() << " vs "
                                         << expected_in.shape().to_string();
  const Tensor a = to_cpu_f32(actual_in), e = to_cpu_f32(expected_in);
  double max_err = 0;
  int64_t first_bad = -1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<float>()[i], y = e.data<float>()[i];
    const double err = std::fabs(x - y);
    const bool finite = std::isfinite(x) && std::isfinite(y);
    if (finite) max_err = std::max(max_err, err);
    if ((!finite || !(err <= bound(i, y))) && first_bad < 0) first_bad = i;
  }
  if (first_bad < 0) return ::testing::AssertionSuccess();
  const double x = a.data<float>()[first_bad], y = e.data<float>()[first_bad];
  return ::testing::AssertionFailure() << "first bad index " << first_bad << ": actual " << x << " expected " << y
                                       << " (bound " << bound(first_bad, y) << "); max abs err " << max_err;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::isfinite(t.data<float>()[i])) m = std::max(m, static_cast<double>(std::fabs(t.data<float>()[i])));
  return m;
}

::testing::AssertionResult close_scaled(const Guarded& actual, const Tensor& expected, double rtol, double rel_max,
                                        double atol) {
  const double scale = max_abs(expected);
  ::testing::AssertionResult r = close_within(actual.view(), expected, [&](int64_t, double e) {
    return rtol * std::fabs(e) + rel_max * scale + atol;
  });
  if (!r) return r;
  return actual.guards_intact();
}

::testing::AssertionResult matches(const Guarded& actual, const Tensor& expected, Tolerance tol) {
  ::testing::AssertionResult close = all_close(to_cpu_f32(actual.view()), expected, tol.rtol, tol.atol);
  if (!close) return close;
  return actual.guards_intact();
}

Tolerance output_tolerance(DType dtype, Tolerance f32_tol) {
  if (dtype == DType::f32) return f32_tol;
  return {f32_tol.rtol + 1.01 * kBf16HalfUlp, f32_tol.atol};
}

std::string dtype_label(DType dtype) { return dtype_name(dtype); }

}  // namespace vlm::testing
