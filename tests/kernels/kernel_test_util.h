// Helpers for the kernel tests: float64 copies of tensors, central finite differences of sum(dy * f(inputs)),
// NaN-filled outputs (to catch unwritten elements), bitwise comparison, and death-test setup.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "testing/test_util.h"

namespace vlm::testing {

using Doubles = std::vector<double>;
// A float64 reference forward: inputs -> outputs (flattened).
using RefFn = std::function<Doubles(const std::vector<Doubles>& inputs)>;

Doubles to_doubles(const Tensor& t);                             // f32 or i32, contiguous
Tensor from_doubles(const Doubles& values, const Shape& shape);  // rounds to f32
Tensor i32_tensor(const std::vector<int32_t>& values);
Tensor nan_tensor(const Shape& shape);
// a + alpha * b, element-wise.
Doubles axpy(const Doubles& a, const Doubles& b, double alpha);

// d/d inputs[which][i] of sum_j dy[j] * ref(inputs)[j] for every i, by central differences (step h), in float64.
Doubles numeric_grad(const RefFn& ref, std::vector<Doubles> inputs, size_t which, const Doubles& dy, double h = 1e-5);

// True when the two tensors have the same shape and the same bytes.
::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b);

// Runs `fn` with OpenMP limited to `threads` threads, restoring the previous limit afterwards.
void with_threads(int threads, const std::function<void()>& fn);

// Death tests re-execute the binary ("threadsafe"): forking under live OpenMP/OpenBLAS thread pools can hang.
void use_threadsafe_death_tests();

}  // namespace vlm::testing
