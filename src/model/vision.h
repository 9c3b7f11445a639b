// SigLIP-style vision transformer: patch embedding (conv as GEMM), learned positions, pre-LN blocks with GELU-tanh
// MLPs, no CLS token, a final LayerNorm. Tensor names follow Hugging Face SmolVLM/Idefics3
// ("model.vision_model.encoder.layers.N.self_attn.q_proj.weight", ...).
#pragma once

#include <vector>

#include "model/layers.h"
#include "model/model_config.h"

namespace vlm {

class VisionTransformer {
 public:
  // What a block's backward reads. With recomputation the forward keeps only `x` and the backward refills the rest
  // by running the block's forward again.
  struct BlockSaved {
    Tensor x;  // block input (residual stream)
    LayerNorm::Saved ln1, ln2;
    Tensor ln1_out, h, ln2_out, fc1_out, act_out;
    SelfAttention::Saved attn;
  };
  struct Saved {
    Tensor patches;  // [N*P, C*p*p]
    std::vector<BlockSaved> blocks;
    Tensor pre_final;  // input of post_layernorm
    LayerNorm::Saved final_ln;
    SeqInfo seq;
    bool recompute = false;  // blocks hold only their input (set by the forward that filled this)
  };

  VisionTransformer(ParameterStore& store, const VisionConfig& config, Device device);

  // images [N, C, H, W] (normalized) -> features [N * P, hidden].
  Tensor forward(const Tensor& images, Saved& saved) const;
  // dfeatures [N * P, hidden] -> accumulates parameter grads (no image gradient is produced).
  void backward(const Tensor& dfeatures, const Saved& saved) const;
  // true: the forward keeps only each block's input and the backward recomputes the block first (same gradients,
  // bit for bit; one more forward of every block, activations of one block alive at a time instead of all).
  void set_recompute_blocks(bool on) { recompute_blocks_ = on; }
  bool recompute_blocks() const { return recompute_blocks_; }
  // Sets the (trainable) position embeddings to 2-D sine-cosine values of rms `scale` (MAE-style): patches start
  // out knowing their row and column, so spatial features need not be learned from nothing.
  void init_position_embedding_sincos(float scale);
  // Sharding units: the embeddings (stem), the blocks in order, the final LayerNorm.
  int stem_unit() const { return stem_unit_; }
  std::vector<int> block_units() const;
  int post_unit() const { return post_unit_; }

 private:
  struct Block {
    LayerNorm ln1, ln2;
    SelfAttention attn;
    Linear fc1, fc2;
    int unit = -1;
  };
  // One block on x [T, D]: fills `saved` (saved.x = x) and returns the block's output; with need_output false
  // (recomputation before the backward) stops after the last activation the backward reads.
  Tensor block_forward(const Block& b, const Tensor& x, const SeqInfo& seq, BlockSaved& saved,
                       bool need_output) const;

  VisionConfig config_;
  const ParameterStore* store_;  // its unit hooks (UnitScope)
  int stem_unit_ = -1, post_unit_ = -1;  // sharding units: the patch and position embeddings; the final LayerNorm
  bool recompute_blocks_ = false;
  Param* patch_w_ = nullptr;  // [D, C, p, p]
  Param* patch_b_ = nullptr;  // [D]
  Param* pos_ = nullptr;      // [P, D]
  std::vector<Block> blocks_;
  LayerNorm post_ln_;
};

}  // namespace vlm
