// vlm's forward on the GPU against transformers' fp32 CPU reference: fp32 within 1e-4 relative, bf16 within twice
// transformers' own bf16 error + 5e-3. Skips without a CUDA device.
#include <gtest/gtest.h>

#include "core/device.h"
#include "hf_parity.h"

namespace vlm {
namespace {

class HfParityGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(HfParityGpu, Fp32MatchesTransformers) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  testing::expect_hf_parity(GetParam(), Device::cuda(0), DType::f32);
}

TEST_P(HfParityGpu, Bf16WithinTheStatedBound) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  testing::expect_hf_parity(GetParam(), Device::cuda(0), DType::bf16);
}

INSTANTIATE_TEST_SUITE_P(Families, HfParityGpu, ::testing::ValuesIn(testing::hf_fixture_families()));

}  // namespace
}  // namespace vlm
