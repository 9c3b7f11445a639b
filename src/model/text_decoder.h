// Llama-family decoder: token embeddings, pre-RMSNorm blocks with GQA self-attention (RoPE, causal, optional
// qkv bias as in Qwen2) and SwiGLU MLPs, a final RMSNorm and the LM head (tied to the embeddings or not).
// Names follow Hugging Face SmolVLM: "model.text_model.layers.N.self_attn.q_proj.weight", "lm_head.weight".
#pragma once

#include <vector>

#include "model/layers.h"
#include "model/model_config.h"

namespace vlm {

// One inference step over a paged KV cache (src/infer): a batch of sequence chunks, each the next rows of its
// sequence (a prefill chunk, or one token when decoding). Every tensor on the model's device.
struct PagedStep {
  Tensor positions;     // i32 [T] absolute position of each row in its sequence (RoPE)
  Tensor slot_mapping;  // i32 [T] cache slot (block * block_size + offset) each row's K/V is written to; -1 skips
  Tensor block_tables;  // i32 [B, max_blocks] each sequence's blocks in order (rows padded past its context)
  Tensor context_lens;  // i32 [B] tokens of each sequence in the cache once this step's rows are written
  Tensor cu_seqlens_q;  // i32 [B+1] rows of each sequence in this step (its last rows: queries are bottom-right)
  int max_seqlen_q = 0;
  int max_context_len = 0;
};

// Per-layer K and V caches, each [num_blocks, block_size, kv_heads, head_dim] in the compute dtype.
struct PagedKvCaches {
  std::vector<Tensor> k, v;
};

class TextDecoder {
 public:
  // What a block's backward reads. With recomputation the forward keeps only `x` and the backward refills the rest
  // by running the block's forward again.
  struct BlockSaved {
    Tensor x;  // block input (residual stream)
    RMSNorm::Saved n1, n2;
    Tensor n1_out, h, n2_out, gate_up, act;  // gate_up [T, 2 * intermediate]: gate, then up
    SelfAttention::Saved attn;
  };
  struct Saved {
    std::vector<BlockSaved> blocks;
    Tensor pre_final;
    RMSNorm::Saved final_norm;
    bool recompute = false;  // blocks hold only their input (set by the forward that filled this)
  };

  TextDecoder(ParameterStore& store, const TextConfig& config, Device device);

  // tokens i32 [T] -> embeddings [T, hidden].
  Tensor embed(const Tensor& tokens) const;
  // Accumulates the embedding gradient for dx0 [T, hidden].
  void embed_backward(const Tensor& dx0, const Tensor& tokens) const;
  // x0 [T, hidden] -> final normalized hidden states [T, hidden].
  Tensor forward(const Tensor& x0, const SeqInfo& seq, Saved& saved) const;
  // Returns dx0 [T, hidden].
  Tensor backward(const Tensor& dhidden, const SeqInfo& seq, const Saved& saved) const;
  // true: the forward keeps only each block's input and the backward recomputes the block first (same gradients,
  // bit for bit; one more forward of every block, activations of one block alive at a time instead of all).
  void set_recompute_blocks(bool on) { recompute_blocks_ = on; }
  bool recompute_blocks() const { return recompute_blocks_; }
  // Inference over paged KV: x0 [T, hidden] (embeddings of the step's rows) -> f32 logits [R, vocab] at
  // `logit_rows` (i32 [R]). Each layer writes the rows' K/V into `caches` (ops::qkv_split_paged_write) and attends over
  // its sequence's cached context (ops::paged_attention). The same parameters and ops as training; nothing saved.
  // With `logits_out` (f32 [R, vocab] on the model's device) the logits are written there and it is returned: a
  // CUDA graph's output that stays put across replays.
  Tensor forward_paged(const Tensor& x0, const PagedStep& step, PagedKvCaches& caches, const Tensor& logit_rows,
                       Tensor* logits_out = nullptr) const;
  const Linear& lm_head() const { return lm_head_; }
  // The sharding unit holding the LM head's weight: its own, or the embeddings' when tied.
  int lm_head_unit() const { return lm_head_unit_; }
  int embed_unit() const { return embed_unit_; }
  std::vector<int> block_units() const;
  int norm_unit() const { return norm_unit_; }
  const TextConfig& config() const { return config_; }

 private:
  struct Block {
    RMSNorm n1, n2;
    SelfAttention attn;
    PackedLinear gate_up;  // parts mlp.gate_proj, mlp.up_proj: one GEMM
    Linear down;
    int unit = -1;
  };
  // One block on x [T, hidden]: fills `saved` (saved.x = x) and returns the block's output; with need_output false
  // (recomputation before the backward) stops after the last activation the backward reads.
  Tensor block_forward(const Block& b, const Tensor& x, const SeqInfo& seq, BlockSaved& saved,
                       bool need_output) const;

  TextConfig config_;
  const ParameterStore* store_;  // its unit hooks (UnitScope)
  int embed_unit_ = -1, norm_unit_ = -1, lm_head_unit_ = -1;  // sharding units besides the blocks'
  bool recompute_blocks_ = false;
  Param* embed_ = nullptr;  // [V, hidden]
  std::vector<Block> blocks_;
  RMSNorm final_norm_;
  Linear lm_head_;  // weight is embed_ when tied
};

}  // namespace vlm
