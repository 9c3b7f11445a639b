// Llama-family decoder: token embeddings, pre-RMSNorm blocks with GQA self-attention (RoPE, causal, optional
// qkv bias as in Qwen2) and SwiGLU MLPs, a final RMSNorm and the LM head (tied to the embeddings or not).
// Names follow Hugging Face SmolVLM: "model.text_model.layers.N.self_attn.q_proj.weight", "lm_head.weight".
#pragma once

#include <vector>

#include "model/layers.h"
#include "model/model_config.h"

namespace vlm {

class TextDecoder {
 public:
  struct BlockSaved {
    Tensor x;
    RMSNorm::Saved n1, n2;
    Tensor n1_out, h, n2_out, gate, up, act;
    SelfAttention::Saved attn;
  };
  struct Saved {
    std::vector<BlockSaved> blocks;
    Tensor pre_final;
    RMSNorm::Saved final_norm;
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
  const Linear& lm_head() const { return lm_head_; }
  const TextConfig& config() const { return config_; }

 private:
  struct Block {
    RMSNorm n1, n2;
    SelfAttention attn;
    Linear gate, up, down;
  };
  TextConfig config_;
  Param* embed_ = nullptr;  // [V, hidden]
  std::vector<Block> blocks_;
  RMSNorm final_norm_;
  Linear lm_head_;  // weight is embed_ when tied
};

}  // namespace vlm
