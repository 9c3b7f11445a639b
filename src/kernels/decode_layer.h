// ops::decoder_layer_decode: one pre-norm decoder layer (Llama, Qwen2, SmolLM2) of an inference step over the paged KV
// cache, as one op. It is the composition TextDecoder::forward_paged runs per layer, and on the CPU (and on CUDA
// wherever the fused kernel does not apply) exactly that composition. On CUDA, a decode step of at most 8 rows in
// bf16 with head dim 64 runs as ONE persistent kernel (cuda/decode_layer.cu): its five phases (the QKV GEMV with
// RoPE and the cache write, the paged attention, the output projection, the gate/up GEMV, the down projection) are
// separated by grid-wide barriers instead of kernel boundaries, and each block starts its next phase's weights
// towards L2 before it waits. At batch 1 a small model's layer is latency, not bandwidth: five launches and their
// drains cost more than the arithmetic. The fused kernel reuses the GEMV's and the decode attention's device code, so
// its outputs equal the unfused CUDA path's bit for bit.
// Kept out of ops.h: it is a composite of ops.h's ops with a weights struct, used by the inference step alone.
#pragma once

#include "core/tensor.h"

namespace vlm::ops {

// One layer's parameters, in the compute dtype (biases undefined when absent).
struct DecoderLayerWeights {
  Tensor attn_norm;  // [E]
  float attn_eps = 1e-5f;
  Tensor qkv_w, qkv_b;  // [(Hq + 2 Hkv) D, E], [(Hq + 2 Hkv) D]: q rows, then k rows, then v rows
  Tensor o_w, o_b;      // [E, Hq D], [E]
  Tensor mlp_norm;      // [E]
  float mlp_eps = 1e-5f;
  Tensor gate_up_w, gate_up_b;  // [2 I, E], [2 I]: gate rows, then up rows
  Tensor down_w, down_b;        // [E, I], [E]
};

// The paged step's tables, as ops::paged_attention reads them (see there): positions and slot_mapping i32 [T],
// block_tables i32 [B, max_blocks], context_lens i32 [B], cu_seqlens_q i32 [B + 1].
struct PagedStepTables {
  const Tensor& positions;
  const Tensor& slot_mapping;
  const Tensor& block_tables;
  const Tensor& context_lens;
  const Tensor& cu_seqlens_q;
  int max_seqlen_q = 0;
  int max_context_len = 0;
};

// y [T, E] = the layer applied to x [T, E] (T rows of the step, packed by sequence):
//   ops::rmsnorm_qkv_paged_write(q, k_cache, v_cache, x, attn_norm, ...)  (q with RoPE at positions; theta 0: none)
//   ops::paged_attention(attn, q, k_cache, v_cache, tables..., scale, indices_checked)
//   h = x + attn @ o_w^T + o_b                                            (ops::linear_add_forward)
//   act = silu(gate) * up of rmsnorm(h; mlp_norm) @ gate_up_w^T + gate_up_b  (ops::rmsnorm_linear_swiglu_forward)
//   y = h + act @ down_w^T + down_b                                       (ops::linear_add_forward)
// writing this step's K/V rows into k_cache, v_cache [num_blocks, block_size, Hkv, D]. y must not overlap x or the
// caches. Errors as those ops report them.
void decoder_layer_decode(Tensor& y, const Tensor& x, const DecoderLayerWeights& w, Tensor& k_cache, Tensor& v_cache,
                          const PagedStepTables& step, float theta, float scale, bool indices_checked);

}  // namespace vlm::ops
