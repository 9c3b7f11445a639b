// Test helpers (see test_util.h).
#include "testing/test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <utility>

namespace vlm::testing {

Tensor random_normal(const Shape& shape, uint64_t seed, float std) {
  Tensor t = Tensor::empty(shape, DType::f32);
  Philox rng(seed);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.normal() * std;
  return t;
}

Tensor random_uniform(const Shape& shape, uint64_t seed, float lo, float hi) {
  Tensor t = Tensor::empty(shape, DType::f32);
  Philox rng(seed);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = lo + (hi - lo) * rng.uniform();
  return t;
}

Tensor filled(const Shape& shape, DType dtype, const std::function<double(int64_t)>& value) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = value(i);
    switch (dtype) {
      case DType::f32: t.data<float>()[i] = static_cast<float>(v); break;
      case DType::bf16: t.data<bf16_t>()[i].bits = f32_to_bf16(static_cast<float>(v)); break;
      case DType::i32: t.data<int32_t>()[i] = static_cast<int32_t>(v); break;
      case DType::i64: t.data<int64_t>()[i] = static_cast<int64_t>(v); break;
      case DType::f64: t.data<double>()[i] = v; break;
      case DType::u8: t.data<uint8_t>()[i] = static_cast<uint8_t>(v); break;
      default: VLM_FAIL("filled: dtype ", dtype_name(dtype), " is not supported");
    }
  }
  return t;
}

::testing::AssertionResult all_close(const Tensor& actual_in, const Tensor& expected_in, double rtol, double atol) {
  if (actual_in.shape() != expected_in.shape())
    return ::testing::AssertionFailure() << "shape " << actual_in.shape().to_string() << " vs "
                                         << expected_in.shape().to_string();
  Tensor a = actual_in.to(Device::cpu()), e = expected_in.to(Device::cpu());
  double max_abs = 0, max_rel = 0;
  int64_t first_bad = -1;
  double bad_a = 0, bad_e = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.item_f32(i), y = e.item_f32(i);
    double err = std::fabs(x - y);
    bool finite = std::isfinite(x) && std::isfinite(y);
    if (finite) {
      max_abs = std::max(max_abs, err);
      max_rel = std::max(max_rel, err / std::max(std::fabs(y), 1e-12));
    }
    if (!finite || !(err <= atol + rtol * std::fabs(y))) {
      if (first_bad < 0) {
        first_bad = i;
        bad_a = x;
        bad_e = y;
      }
    }
  }
  if (first_bad < 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "first bad index " << first_bad << ": actual " << bad_a << " expected "
                                       << bad_e << "; max abs err " << max_abs << ", max rel err " << max_rel
                                       << " (rtol " << rtol << ", atol " << atol << ")";
}

std::string scratch_dir(const std::string& name) {
  namespace fs = std::filesystem;
  fs::path p = fs::temp_directory_path() / ("vlm_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

ScopedEnv::ScopedEnv(std::string name, const char* value) : name_(std::move(name)) {
  if (const char* old = std::getenv(name_.c_str())) old_ = old;
  if (value != nullptr) ::setenv(name_.c_str(), value, 1);
  else ::unsetenv(name_.c_str());
}

ScopedEnv::~ScopedEnv() {
  if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
  else ::unsetenv(name_.c_str());
}

CommandResult run_command(const std::string& binary, const std::string& args) {
  const std::string cmd = binary + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed: " + cmd};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace vlm::testing
