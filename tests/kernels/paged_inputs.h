// Random paged-attention problems shared by the CPU and CUDA tests: a cache whose blocks are handed to the sequences
// in a shuffled order, with every slot no sequence may read set to NaN (so reading one poisons the output), block
// tables padded with -1, and the queries.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace vlm::testing {

struct PagedCase {
  const char* name;
  std::vector<int32_t> context_lens;  // L_b
  std::vector<int32_t> query_lens;    // Lq_b <= L_b (1: decode)
  int64_t heads_q, heads_kv, dim, block_size;
};

// The CPU f32 tensors of one problem (the tables i32).
struct PagedInputs {
  Tensor q, k_cache, v_cache, block_tables, context_lens, cu_q;
  std::vector<std::vector<int64_t>> slots;  // slots[b][p]: the cache slot of sequence b's position p
  int max_q = 0, max_ctx = 0;
  float scale = 1.f;
};

PagedInputs make_paged_inputs(const PagedCase& c, uint64_t seed);

// 0, l0, l0 + l1, ...
std::vector<int32_t> cumulative_lens(const std::vector<int32_t>& lens);

}  // namespace vlm::testing
