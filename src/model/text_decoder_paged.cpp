// TextDecoder::forward_paged: the decoder's inference step over a paged KV cache. Each norm runs fused into the
// projection after it (ops::rmsnorm_linear_forward, rmsnorm_linear_swiglu_forward) and each residual add into the
// projection before it (linear_add_forward), so that a decode step at small batch is one weight pass per projection.
#include <cmath>

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
  const int H = c.heads, D = c.head_dim();
  VLM_CHECK(caches.k.size() == blocks_.size() && caches.v.size() == blocks_.size(), "forward_paged: ", caches.k.size(),
            " K caches for ", blocks_.size(), " layers");
  VLM_CHECK(step.positions.numel() == T && step.slot_mapping.numel() == T, "forward_paged: ", T, " rows but ",
            step.positions.numel(), " positions and ", step.slot_mapping.numel(), " slots");
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  Tensor x = x0;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    // q, and the rows' K/V into their cache slots, of the normalized rows, with RoPE at the absolute positions.
    Tensor q = new_like({T, H, D}, x);
    ops::rmsnorm_qkv_paged_write(q, caches.k[i], caches.v[i], x, b.n1.w->weight(), b.n1.eps,
                                 packed_weight(b.attn.qkv), packed_bias(b.attn.qkv), step.positions,
                                 step.slot_mapping, c.rope_theta);
    Tensor out = new_like({T, H, D}, x);
    ops::paged_attention(out, q, caches.k[i], caches.v[i], step.block_tables, step.context_lens, step.cu_seqlens_q,
                         step.max_seqlen_q, step.max_context_len, scale, /*indices_checked=*/i > 0);
    const Tensor h = b.attn.o.forward_add(out.view({T, H * D}), x);  // h = x + attn
    Tensor act = new_like({T, c.intermediate}, x);
    ops::rmsnorm_linear_swiglu_forward(act, h, b.n2.w->weight(), b.n2.eps, packed_weight(b.gate_up),
                                       packed_bias(b.gate_up));
    x = b.down.forward_add(act, h);
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
