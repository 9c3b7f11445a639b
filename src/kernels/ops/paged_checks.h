// The paged KV cache's operand checks (defined in ops/paged_attention.cpp), shared by the ops that read or write the
// cache: the paged_attention family and decoder_layer_decode. Each aborts naming the op and the tensor.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace vlm::ops::detail {

// k_cache and v_cache: [num_blocks, block_size, Hkv, D] of the compute dtype on `dev`, one shape, block_size > 0.
void check_caches(const char* op, const Tensor& k_cache, const Tensor& v_cache, DType dt, Device dev);
// The checks qkv_split_paged_write and rmsnorm_qkv_paged_write share: q [T, Hq, D] and the caches of one dtype and
// device, an even head dim, theta, positions and slot_mapping for T rows, q disjoint from the caches.
void check_split_paged_write(const char* op, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                             const Tensor& positions, const Tensor& slot_mapping, float theta, DType dt);
// cu_seqlens_q i32 [B + 1], context_lens i32 [B], block_tables i32 [B, max_blocks] on `dev`, the bounds >= 0 (their
// values are checked where they are read); returns B.
int64_t check_paged_tables(const char* op, const Tensor& block_tables, const Tensor& context_lens,
                           const Tensor& cu_seqlens_q, int max_seqlen_q, int max_context_len, Device dev);

}  // namespace vlm::ops::detail
