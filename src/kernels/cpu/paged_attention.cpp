// The paged KV cache on the CPU, the plain reference: paged_kv_write copies rows into their slots; paged_attention
// runs one task per (sequence, q head), and each query row gathers its visible keys through the block table, takes
// a max-subtracted softmax and the weighted sum of values (the arithmetic of cpu/attention.cpp's forward, so a
// sequence whose cache holds its keys in order gives the same bits as attention_forward over those keys).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"

namespace vlm::ops::cpu {

void check_kv_slots(const char* op, const int32_t* slots, int64_t tokens, int64_t num_slots) {
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t s = slots[t];
    VLM_CHECK(s >= -1 && s < num_slots, "ops::", op, ": slot_mapping[", t, "] = ", s, " is outside [-1, ", num_slots,
              ") (num_blocks * block_size cache slots; -1 skips a row)");
  }
}

void paged_kv_write(float* k_cache, float* v_cache, const float* k, const float* v, const int32_t* slots,
                    int64_t tokens, int64_t num_slots, int64_t row) {
  check_kv_slots("paged_kv_write", slots, tokens, num_slots);
  const size_t bytes = static_cast<size_t>(row) * sizeof(float);
#pragma omp parallel for if (tokens * row >= kParallelMinWork)
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t s = slots[t];
    if (s < 0) continue;
    std::memcpy(k_cache + s * row, k + t * row, bytes);
    std::memcpy(v_cache + s * row, v + t * row, bytes);
  }
}

void check_paged_attention(const char* op, const PagedAttentionParams& p) {
  check_cu_seqlens(op, "cu_seqlens_q", p.cu_seqlens_q, p.batch, p.tokens_q, p.max_seqlen_q);
  const int64_t capacity = p.max_blocks_per_seq * p.block_size;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t len = p.context_lens[b], lq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    VLM_CHECK(len >= lq, "ops::", op, ": context_lens[", b, "] = ", len, " is less than the sequence's ", lq,
              " queries (their K/V must be in the cache)");
    VLM_CHECK(len <= p.max_context_len, "ops::", op, ": context_lens[", b, "] = ", len, " > max_context_len ",
              p.max_context_len);
    VLM_CHECK(len <= capacity, "ops::", op, ": context_lens[", b, "] = ", len, " exceeds the block table's ",
              p.max_blocks_per_seq, " blocks x ", p.block_size, " = ", capacity, " positions");
    const int64_t used = (len + p.block_size - 1) / p.block_size;
    for (int64_t j = 0; j < used; ++j) {
      const int64_t id = p.block_tables[b * p.max_blocks_per_seq + j];
      VLM_CHECK(id >= 0 && id < p.num_blocks, "ops::", op, ": block_tables[", b, ", ", j, "] = ", id,
                " is outside [0, ", p.num_blocks, ") (num_blocks of the cache)");
    }
  }
}

void paged_attention(float* out, const PagedAttentionParams& p) {
  check_paged_attention("paged_attention", p);
  const int64_t dim = p.head_dim, group = p.heads_q / p.heads_kv;
  const int64_t stride_q = p.heads_q * dim, stride_slot = p.heads_kv * dim;
  const int64_t tasks = p.batch * p.heads_q;
  const int64_t work = static_cast<int64_t>(p.max_seqlen_q) * p.max_context_len * tasks * dim;
#pragma omp parallel if (work >= kParallelMinWork)
  {
    std::vector<float> probs(static_cast<size_t>(std::max(p.max_context_len, 1)));
    std::vector<const float*> keys(probs.size()), values(probs.size());
    std::vector<float> acc(static_cast<size_t>(dim));
#pragma omp for schedule(static, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / p.heads_q, h = task % p.heads_q, kvh = h / group;
      const int64_t q0 = p.cu_seqlens_q[b], lq = p.cu_seqlens_q[b + 1] - q0, len = p.context_lens[b];
      const int32_t* table = p.block_tables + b * p.max_blocks_per_seq;
      for (int64_t j = 0; j < len; ++j) {  // the sequence's key and value rows of this kv head, in position order
        const int64_t slot = static_cast<int64_t>(table[j / p.block_size]) * p.block_size + j % p.block_size;
        keys[static_cast<size_t>(j)] = p.k_cache + slot * stride_slot + kvh * dim;
        values[static_cast<size_t>(j)] = p.v_cache + slot * stride_slot + kvh * dim;
      }
      for (int64_t i = 0; i < lq; ++i) {
        const float* qi = p.q + (q0 + i) * stride_q + h * dim;
        float* oi = out + (q0 + i) * stride_q + h * dim;
        const int64_t n = i + len - lq + 1;  // >= 1: len >= lq was checked
        attend_row(
            oi, qi, [&](int64_t j) { return keys[static_cast<size_t>(j)]; },
            [&](int64_t j) { return values[static_cast<size_t>(j)]; }, n, dim, p.scale, probs.data(), acc.data());
      }
    }
  }
}

}  // namespace vlm::ops::cpu
