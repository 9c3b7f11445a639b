// TextDecoder::forward_paged: the decoder's inference step over a paged KV cache. Each layer is one
// ops::decoder_layer_decode (each norm fused into the projection after it, each residual add into the projection
// before it; at small batch on CUDA the whole layer is one persistent kernel); the final norm, the LM head and the
// f32 logits are one op over the rows that sample.
#include <cmath>

#include "kernels/decode_layer.h"
#include "kernels/ops.h"
#include "model/text_decoder.h"

namespace vlm {

namespace {
// A packed projection's weight as one [out, in] matrix, and its bias (undefined without).
Tensor packed_weight(const PackedLinear& p) { return p.w->weight().view({p.out, p.in}); }
Tensor packed_bias(const PackedLinear& p) { return p.b ? p.b->weight() : Tensor(); }
}  // namespace

Tensor TextDecoder::forward_paged(const Tensor& x0, const PagedStep& step, PagedKvCaches& caches,
                                  const Tensor& logit_rows, Tensor* logits_out) const {
  const TextConfig& c = config_;
  const int64_t T = x0.dim(0);
  const int D = c.head_dim();
  VLM_CHECK(caches.k.size() == blocks_.size() && caches.v.size() == blocks_.size(), "forward_paged: ", caches.k.size(),
            " K caches for ", blocks_.size(), " layers");
  VLM_CHECK(step.positions.numel() == T && step.slot_mapping.numel() == T, "forward_paged: ", T, " rows but ",
            step.positions.numel(), " positions and ", step.slot_mapping.numel(), " slots");
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  const ops::PagedStepTables tables{step.positions,   step.slot_mapping, step.block_tables, step.context_lens,
                                    step.cu_seqlens_q, step.max_seqlen_q, step.max_context_len};
  Tensor x = x0;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    ops::DecoderLayerWeights w;
    w.attn_norm = b.n1.w->weight();
    w.attn_eps = b.n1.eps;
    w.qkv_w = packed_weight(b.attn.qkv);
    w.qkv_b = packed_bias(b.attn.qkv);
    w.o_w = b.attn.o.w->weight();
    w.o_b = b.attn.o.b ? b.attn.o.b->weight() : Tensor();
    w.mlp_norm = b.n2.w->weight();
    w.mlp_eps = b.n2.eps;
    w.gate_up_w = packed_weight(b.gate_up);
    w.gate_up_b = packed_bias(b.gate_up);
    w.down_w = b.down.w->weight();
    w.down_b = b.down.b ? b.down.b->weight() : Tensor();
    Tensor y = new_like({T, c.hidden}, x);
    // The step's first layer checks the tables; the later ones run fused where they can (kernels/decode_layer.h).
    ops::decoder_layer_decode(y, x, w, caches.k[i], caches.v[i], tables, c.rope_theta, scale,
                              /*indices_checked=*/i > 0);
    x = y;
  }
  if (logit_rows.numel() == 0) return Tensor::empty({0, c.vocab_size}, DType::f32, x.device());
  // Only the rows that sample: the final norm is per row, so normalizing them alone changes nothing.
  Tensor sel = new_like({logit_rows.numel(), c.hidden}, x);
  ops::gather_rows(sel, x, logit_rows);
  // The final norm and the LM head in one op, writing f32 logits (the values the compute dtype holds).
  const Shape shape{logit_rows.numel(), c.vocab_size};
  Tensor logits = logits_out ? *logits_out : new_f32_like(shape, x);
  VLM_CHECK(logits.dtype() == DType::f32 && logits.shape() == shape, "forward_paged: logits_out ",
            logits.describe(), ", expected f32", shape.to_string());
  ops::rmsnorm_linear_forward(logits, sel, final_norm_.w->weight(), final_norm_.eps, lm_head_.w->weight(),
                              lm_head_.b ? lm_head_.b->weight() : Tensor());
  return logits;
}

}  // namespace vlm
