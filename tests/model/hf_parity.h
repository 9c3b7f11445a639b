// Parity with transformers on the fixtures of dev/fixtures/make_hf_fixtures.py (tests/model/fixtures/hf/<family>:
// the checkpoint as transformers saved it, inputs.safetensors, outputs.safetensors of transformers' fp32 CPU forward
// with logits_bf16 of its bf16 forward). Shared by the CPU test and its gpu-labelled twin.
#pragma once

#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace vlm::testing {

// The families the fixture script writes.
const std::vector<std::string>& hf_fixture_families();
// tests/model/fixtures/hf (relative to the source root, where ctest runs).
std::string hf_fixture_root();
// Runs `family`'s fixture through vlm on `device` in `dtype` and checks the output against transformers' fp32
// reference: max |ours - ref| / max |ref| <= 1e-4 in fp32; in bf16 <= 2 x the error of transformers' own bf16
// forward + 5e-3. NaN fails.
void expect_hf_parity(const std::string& family, Device device, DType dtype);

}  // namespace vlm::testing
