// TextDecoder forward/backward.
#include "model/text_decoder.h"

#include "kernels/ops.h"

namespace vlm {

TextDecoder::TextDecoder(ParameterStore& store, const TextConfig& c, Device device) : config_(c) {
  const std::string root = "model.text_model.";
  const ParamGroup g = ParamGroup::text;
  embed_ = store.add(root + "embed_tokens.weight", g, {c.vocab_size, c.hidden}, false, device);
  AttentionShape shape{c.heads, c.kv_heads, c.head_dim(), /*causal=*/true, /*rope=*/true, c.rope_theta};
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = root + "layers." + std::to_string(i) + ".";
    Block b;
    b.n1 = RMSNorm::create(store, p + "input_layernorm", g, c.hidden, c.rms_eps, device);
    b.attn = SelfAttention::create(store, p + "self_attn", "o_proj", g, c.hidden, shape, c.qkv_bias, false, device);
    b.n2 = RMSNorm::create(store, p + "post_attention_layernorm", g, c.hidden, c.rms_eps, device);
    b.gate = Linear::create(store, p + "mlp.gate_proj", g, c.hidden, c.intermediate, false, device);
    b.up = Linear::create(store, p + "mlp.up_proj", g, c.hidden, c.intermediate, false, device);
    b.down = Linear::create(store, p + "mlp.down_proj", g, c.intermediate, c.hidden, false, device);
    blocks_.push_back(b);
  }
  final_norm_ = RMSNorm::create(store, root + "norm", g, c.hidden, c.rms_eps, device);
  if (c.tie_embeddings) {
    lm_head_.w = embed_;
  } else {
    lm_head_ = Linear::create(store, "lm_head", g, c.hidden, c.vocab_size, false, device);
  }
}

Tensor TextDecoder::embed(const Tensor& tokens) const {
  Tensor x = new_like({tokens.dim(0), config_.hidden}, embed_->weight());
  ops::embedding_forward(x, embed_->weight(), tokens);
  return x;
}

void TextDecoder::embed_backward(const Tensor& dx0, const Tensor& tokens) const {
  if (embed_->trainable) ops::embedding_backward(embed_->grad, dx0, tokens);
}

Tensor TextDecoder::forward(const Tensor& x0, const SeqInfo& seq, Saved& s) const {
  Tensor x = x0;
  s.blocks.assign(blocks_.size(), {});
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    BlockSaved& bs = s.blocks[i];
    bs.x = x;
    bs.n1_out = b.n1.forward(x, bs.n1);
    Tensor attn = b.attn.forward(bs.n1_out, seq, bs.attn);
    bs.h = new_like(x.shape(), x);
    ops::add(bs.h, x, attn);
    bs.n2_out = b.n2.forward(bs.h, bs.n2);
    bs.gate = b.gate.forward(bs.n2_out);
    bs.up = b.up.forward(bs.n2_out);
    bs.act = new_like(bs.gate.shape(), x);
    ops::swiglu_forward(bs.act, bs.gate, bs.up);
    Tensor mlp = b.down.forward(bs.act);
    x = new_like(x.shape(), x);
    ops::add(x, bs.h, mlp);
  }
  s.pre_final = x;
  return final_norm_.forward(x, s.final_norm);
}

Tensor TextDecoder::backward(const Tensor& dhidden, const SeqInfo& seq, const Saved& s) const {
  Tensor dx = final_norm_.backward(dhidden, s.pre_final, s.final_norm);
  for (size_t i = blocks_.size(); i-- > 0;) {
    const Block& b = blocks_[i];
    const BlockSaved& bs = s.blocks[i];
    Tensor d_act = b.down.backward(dx, bs.act, true);
    Tensor d_gate = new_like(bs.gate.shape(), dx), d_up = new_like(bs.up.shape(), dx);
    ops::swiglu_backward(d_gate, d_up, d_act, bs.gate, bs.up);
    Tensor d_n2 = b.gate.backward(d_gate, bs.n2_out, true);
    ops::add_inplace(d_n2, b.up.backward(d_up, bs.n2_out, true));
    Tensor dh = b.n2.backward(d_n2, bs.h, bs.n2);
    ops::add_inplace(dh, dx);
    Tensor d_n1 = b.attn.backward(dh, bs.n1_out, seq, bs.attn);
    dx = b.n1.backward(d_n1, bs.x, bs.n1);
    ops::add_inplace(dx, dh);
  }
  return dx;
}

}  // namespace vlm
