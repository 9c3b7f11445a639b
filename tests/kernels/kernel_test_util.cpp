// Helpers for the kernel tests (see kernel_test_util.h).
#include "kernel_test_util.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace vlm::testing {

Doubles to_doubles(const Tensor& t) {
  Doubles out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::i32) {
    for (int64_t i = 0; i < t.numel(); ++i) out[static_cast<size_t>(i)] = t.data<int32_t>()[i];
  } else {
    for (int64_t i = 0; i < t.numel(); ++i) out[static_cast<size_t>(i)] = t.data<float>()[i];
  }
  return out;
}

Tensor from_doubles(const Doubles& values, const Shape& shape) {
  EXPECT_EQ(static_cast<int64_t>(values.size()), shape.numel());
  Tensor t = Tensor::empty(shape, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(values[static_cast<size_t>(i)]);
  return t;
}

Tensor i32_tensor(const std::vector<int32_t>& values) {
  return Tensor::from_vector(values, Shape{static_cast<int64_t>(values.size())});
}

Tensor nan_tensor(const Shape& shape) { return Tensor::full(shape, std::numeric_limits<float>::quiet_NaN()); }

Doubles axpy(const Doubles& a, const Doubles& b, double alpha) {
  Doubles out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + alpha * b[i];
  return out;
}

Doubles numeric_grad(const RefFn& ref, std::vector<Doubles> inputs, size_t which, const Doubles& dy, double h) {
  auto objective = [&]() {
    const Doubles y = ref(inputs);
    EXPECT_EQ(y.size(), dy.size());
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += dy[i] * y[i];
    return s;
  };
  Doubles& x = inputs[which];
  Doubles grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = objective();
    x[i] = saved - h;
    const double minus = objective();
    x[i] = saved;
    grad[i] = (plus - minus) / (2 * h);
  }
  return grad;
}

::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << a.describe() << " vs " << b.describe();
  const auto* pa = static_cast<const unsigned char*>(a.raw_data());
  const auto* pb = static_cast<const unsigned char*>(b.raw_data());
  const size_t elem = dtype_size(a.dtype());
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(pa + i * elem, pb + i * elem, elem) != 0)
      return ::testing::AssertionFailure()
             << "first differing element " << i << ": " << a.item_f32(i) << " vs " << b.item_f32(i);
  return ::testing::AssertionSuccess();
}

void with_threads(int threads, const std::function<void()>& fn) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  fn();
  omp_set_num_threads(saved);
}

void use_threadsafe_death_tests() { GTEST_FLAG_SET(death_test_style, "threadsafe"); }

}  // namespace vlm::testing
