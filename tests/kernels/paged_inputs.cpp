// Random paged-attention problems for the kernel tests (paged_inputs.h).
#include "paged_inputs.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kernel_test_util.h"

namespace vlm::testing {

std::vector<int32_t> cumulative_lens(const std::vector<int32_t>& lens) {
  std::vector<int32_t> cu(lens.size() + 1, 0);
  std::partial_sum(lens.begin(), lens.end(), cu.begin() + 1);
  return cu;
}

PagedInputs make_paged_inputs(const PagedCase& c, uint64_t seed) {
  PagedInputs in;
  const int64_t batch = static_cast<int64_t>(c.context_lens.size()), bs = c.block_size;
  int64_t max_blocks = 0, used_blocks = 0;
  for (int32_t len : c.context_lens) {
    max_blocks = std::max<int64_t>(max_blocks, (len + bs - 1) / bs);
    used_blocks += (len + bs - 1) / bs;
  }
  max_blocks += 1;  // a padding column of -1 that must never be read
  const int64_t num_blocks = used_blocks + 3;  // spare blocks, NaN
  std::vector<int32_t> order(static_cast<size_t>(num_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(seed)));
  std::vector<int32_t> tables(static_cast<size_t>(batch * max_blocks), -1);
  const int64_t row = c.heads_kv * c.dim;
  const Tensor k_rand = random_normal({num_blocks, bs, c.heads_kv, c.dim}, seed + 1);
  const Tensor v_rand = random_normal({num_blocks, bs, c.heads_kv, c.dim}, seed + 2);
  in.k_cache = nan_tensor(k_rand.shape());
  in.v_cache = nan_tensor(v_rand.shape());
  size_t next = 0;
  in.slots.resize(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = c.context_lens[static_cast<size_t>(b)];
    for (int64_t j = 0; j < (len + bs - 1) / bs; ++j) tables[static_cast<size_t>(b * max_blocks + j)] = order[next++];
    for (int64_t p = 0; p < len; ++p) {
      const int64_t slot = int64_t{tables[static_cast<size_t>(b * max_blocks + p / bs)]} * bs + p % bs;
      in.slots[static_cast<size_t>(b)].push_back(slot);
      std::copy_n(k_rand.data<float>() + slot * row, row, in.k_cache.data<float>() + slot * row);
      std::copy_n(v_rand.data<float>() + slot * row, row, in.v_cache.data<float>() + slot * row);
    }
  }
  const std::vector<int32_t> cu = cumulative_lens(c.query_lens);
  in.q = random_normal({cu.back(), c.heads_q, c.dim}, seed + 3);
  in.block_tables = i32_tensor(tables).view({batch, max_blocks});
  in.context_lens = i32_tensor(c.context_lens);
  in.cu_q = i32_tensor(cu);
  in.max_q = *std::max_element(c.query_lens.begin(), c.query_lens.end());
  in.max_ctx = *std::max_element(c.context_lens.begin(), c.context_lens.end());
  in.scale = 1.f / std::sqrt(static_cast<float>(c.dim));
  return in;
}

}  // namespace vlm::testing
