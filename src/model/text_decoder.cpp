// TextDecoder forward/backward.
#include "model/text_decoder.h"

#include "kernels/ops.h"

namespace vlm {

TextDecoder::TextDecoder(ParameterStore& store, const TextConfig& c, Device device) : config_(c), store_(&store) {
  const std::string root = "model.text_model.";
  const ParamGroup g = ParamGroup::text;
  embed_unit_ = store.begin_unit("text.embed_tokens");
  embed_ = store.add(root + "embed_tokens.weight", g, {c.vocab_size, c.hidden}, false, device);
  AttentionShape shape{c.heads, c.kv_heads, c.head_dim(), /*causal=*/true, /*rope=*/true, c.rope_theta};
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = root + "layers." + std::to_string(i) + ".";
    Block b;
    b.unit = store.begin_unit("text.layers." + std::to_string(i));
    b.n1 = RMSNorm::create(store, p + "input_layernorm", g, c.hidden, c.rms_eps, device);
    b.attn = SelfAttention::create(store, p + "self_attn", "o_proj", g, c.hidden, shape, c.qkv_bias, false, device);
    b.n2 = RMSNorm::create(store, p + "post_attention_layernorm", g, c.hidden, c.rms_eps, device);
    b.gate_up = PackedLinear::create(store, {p + "mlp.gate_proj", p + "mlp.up_proj"}, g, c.hidden,
                                     {c.intermediate, c.intermediate}, false, device);
    b.down = Linear::create(store, p + "mlp.down_proj", g, c.intermediate, c.hidden, false, device);
    blocks_.push_back(b);
  }
  norm_unit_ = store.begin_unit("text.norm");
  final_norm_ = RMSNorm::create(store, root + "norm", g, c.hidden, c.rms_eps, device);
  if (c.tie_embeddings) {
    lm_head_.w = embed_;
    lm_head_unit_ = embed_unit_;
  } else {
    lm_head_unit_ = store.begin_unit("text.lm_head");
    lm_head_ = Linear::create(store, "lm_head", g, c.hidden, c.vocab_size, false, device);
  }
}

std::vector<int> TextDecoder::block_units() const {
  std::vector<int> units;
  for (const Block& b : blocks_) units.push_back(b.unit);
  return units;
}

Tensor TextDecoder::embed(const Tensor& tokens) const {
  const UnitScope unit(*store_, embed_unit_, UnitUse::forward);
  Tensor x = new_like({tokens.dim(0), config_.hidden}, embed_->weight());
  ops::embedding_forward(x, embed_->weight(), tokens);
  return x;
}

void TextDecoder::embed_backward(const Tensor& dx0, const Tensor& tokens) const {
  const UnitScope unit(*store_, embed_unit_, UnitUse::gradients);
  if (embed_->trainable) ops::embedding_backward(embed_->grad, dx0, tokens);
}

Tensor TextDecoder::forward(const Tensor& x0, const SeqInfo& seq, Saved& s) const {
  Tensor x = x0;
  s.blocks.assign(blocks_.size(), {});
  s.recompute = recompute_blocks_;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const UnitScope unit(*store_, blocks_[i].unit, UnitUse::forward);
    if (s.recompute) {
      BlockSaved full;  // freed at the end of the block: only the input stays
      x = block_forward(blocks_[i], x, seq, full, true);
      s.blocks[i].x = full.x;
    } else {
      x = block_forward(blocks_[i], x, seq, s.blocks[i], true);
    }
  }
  s.pre_final = x;
  const UnitScope unit(*store_, norm_unit_, UnitUse::forward);
  return final_norm_.forward(x, s.final_norm);
}

Tensor TextDecoder::block_forward(const Block& b, const Tensor& x, const SeqInfo& seq, BlockSaved& bs,
                                  bool need_output) const {
  bs.x = x;
  bs.n1_out = b.n1.forward(x, bs.n1);
  Tensor attn = b.attn.forward(bs.n1_out, seq, bs.attn);
  bs.n2_out = b.n2.forward_add(bs.h, x, attn, bs.n2);  // h = x + attn
  bs.gate_up = b.gate_up.forward(bs.n2_out);
  bs.act = new_like({x.dim(0), config_.intermediate}, x);
  ops::swiglu_packed_forward(bs.act, bs.gate_up);
  if (!need_output) return Tensor();
  return b.down.forward_add(bs.act, bs.h);  // out = h + mlp
}

Tensor TextDecoder::backward(const Tensor& dhidden, const SeqInfo& seq, const Saved& s) const {
  Tensor dx;
  {
    const UnitScope unit(*store_, norm_unit_, UnitUse::backward);
    dx = final_norm_.backward(dhidden, s.pre_final, s.final_norm);
  }
  for (size_t i = blocks_.size(); i-- > 0;) {
    const Block& b = blocks_[i];
    const UnitScope unit(*store_, b.unit, UnitUse::backward);  // released after the overlap below joined
    BlockSaved redone;
    if (s.recompute) block_forward(b, s.blocks[i].x, seq, redone, false);
    const BlockSaved& bs = s.recompute ? redone : s.blocks[i];
    // The block's weight gradients run on a side stream beside its input gradients, joined at the block's end.
    const ops::WeightGradOverlap overlap(dx.device());
    Tensor d_act = b.down.backward(dx, bs.act, true);
    Tensor d_gate_up = new_like(bs.gate_up.shape(), dx);
    ops::swiglu_packed_backward(d_gate_up, d_act, bs.gate_up);
    Tensor d_n2 = b.gate_up.backward(d_gate_up, bs.n2_out, true);
    Tensor dh = b.n2.backward_add(d_n2, dx, bs.h, bs.n2);  // + the residual path's dx
    Tensor d_n1 = b.attn.backward(dh, bs.n1_out, seq, bs.attn);
    dx = b.n1.backward_add(d_n1, dh, bs.x, bs.n1);
  }
  return dx;
}

}  // namespace vlm
