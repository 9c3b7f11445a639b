// The shape table of the FlashAttention GPU tests and the host-side helpers they share: random bf16/f16 inputs,
// device buffers poisoned with NaN and fenced by guard rows, and the error bound against the naive-bf16 reference.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace vlm::flash::testing {

struct Case {
  std::string name;
  int head_dim = 64, n_heads_q = 4, n_heads_kv = 4;
  std::vector<int32_t> len_q, len_k;  // per sequence
  bool causal = false;
  DType dtype = DType::bf16;
  bool packed_qkv = false;     // q, k, v are column slices of one [T, Hq + 2 Hkv, D] tensor (needs len_q == len_k)
  bool deterministic = false;  // backward mode (also checks two runs are bit-identical)
  bool small = false;          // cheap enough for the compute-sanitizer runs (test names contain "san")
  bool portable = false;       // force the portable path (else auto: Hopper where it applies)
};

std::vector<Case> all_cases();
std::string case_name(const Case& c);  // a gtest-safe name

// Host values of a low-precision tensor, exactly representable in `dtype`.
struct HostTensor {
  std::vector<uint16_t> bits;
  std::vector<double> values;
};
HostTensor random_host(int64_t n, DType dtype, uint64_t seed);

// A device buffer of rows [guard | rows | guard] x cols of 16-bit elements, all set to NaN bits; `view` is the
// middle rows reshaped to [rows, heads, dim]. check_guards() verifies the guard rows were not written.
struct GuardedOutput {
  Tensor buffer;  // [2 * kGuardRows + rows, heads, dim]
  Tensor view;
  int64_t rows = 0;
  static constexpr int64_t kGuardRows = 3;
  GuardedOutput(int64_t rows, int64_t heads, int64_t dim, DType dtype, Device device);
  std::vector<double> values() const;   // the middle rows, as doubles (NaN where unwritten)
  std::vector<uint16_t> bits() const;   // the middle rows' raw bits
  ::testing::AssertionResult check_guards() const;
};

// Uploads 16-bit elements as a contiguous device tensor of `shape`.
Tensor upload_bits(const std::vector<uint16_t>& bits, const Shape& shape, DType dtype, Device device);
std::vector<float> download_f32(const Tensor& t);

// Passes when every element of `ours` is finite (or equals the reference's +-inf exactly), and
// max|ours - exact| <= k * max|naive - exact| + floor_rel * max|exact| + floor_abs.
::testing::AssertionResult within_naive_bound(const std::string& what, const std::vector<double>& ours,
                                              const std::vector<double>& exact, const std::vector<double>& naive,
                                              double k, double floor_rel, double floor_abs);

}  // namespace vlm::flash::testing
