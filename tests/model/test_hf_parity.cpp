// vlm's forward against transformers' on the CPU in fp32 (1e-4 relative): one test per fixture family.
#include <gtest/gtest.h>

#include "hf_parity.h"

namespace vlm {
namespace {

class HfParity : public ::testing::TestWithParam<std::string> {};

TEST_P(HfParity, CpuFp32MatchesTransformers) { testing::expect_hf_parity(GetParam(), Device::cpu(), DType::f32); }

INSTANTIATE_TEST_SUITE_P(Families, HfParity, ::testing::ValuesIn(testing::hf_fixture_families()));

}  // namespace
}  // namespace vlm
