// Shared test helpers: random tensors, element-wise comparison that fails on NaN and reports the first bad index,
// and a scratch directory per test.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>

#include "core/philox.h"
#include "core/tensor.h"

namespace vlm::testing {

// f32 CPU tensor with N(0, std^2) entries from Philox(seed).
Tensor random_normal(const Shape& shape, uint64_t seed, float std = 1.f);
Tensor random_uniform(const Shape& shape, uint64_t seed, float lo, float hi);
// CPU tensor of `dtype` (f32, bf16, f64, i32, i64, u8) whose flat element i is value(i), rounded to the dtype
// (integers: truncated).
Tensor filled(const Shape& shape, DType dtype, const std::function<double(int64_t)>& value);

// Compares element-wise: passes when |a - b| <= atol + rtol * |b| for every element and no element is NaN/inf in
// either. On failure, the message holds max-abs error, max-rel error and the first bad index.
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double rtol, double atol);

// A fresh empty directory under the build's temp area, removed when the test's process exits.
std::string scratch_dir(const std::string& name);

// What a command printed (stdout and stderr together) and its exit code (-1 when a signal ended it).
struct CommandResult {
  int code;
  std::string out;
};
// Runs `binary args` through the shell, as a user would type it (the tests of the `vlm` and bench binaries).
CommandResult run_command(const std::string& binary, const std::string& args);

// Sets environment variable `name` to `value` (nullptr: unsets it) for the scope; restores the former state on exit.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace vlm::testing
