// Random bf16 device buffers for the attention benchmark.
#pragma once

#include <cstdint>

namespace vlm::bench {

void fill_random_bf16(void* data, int64_t n, uint64_t seed);

}  // namespace vlm::bench
