// TextDecoder::forward_paged: the decoder's inference step over a paged KV cache.
#include <cmath>

#include "kernels/ops.h"
#include "model/text_decoder.h"

namespace vlm {

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
    RMSNorm::Saved n1s, n2s;  // unused: no backward
    const Tensor n1 = b.n1.forward(x, n1s);
    const Tensor qkv = b.attn.qkv.forward(n1);  // [T, (H + 2 Hkv) D]
    Tensor q = new_like({T, H, D}, x);
    // q, and the rows' K/V into their cache slots, with RoPE at the absolute positions.
    ops::qkv_split_paged_write(q, caches.k[i], caches.v[i], qkv, step.positions, step.slot_mapping, c.rope_theta);
    Tensor out = new_like({T, H, D}, x);
    ops::paged_attention(out, q, caches.k[i], caches.v[i], step.block_tables, step.context_lens, step.cu_seqlens_q,
                         step.max_seqlen_q, step.max_context_len, scale, /*indices_checked=*/i > 0);
    const Tensor attn = b.attn.o.forward(out.view({T, H * D}));
    Tensor h;
    const Tensor n2 = b.n2.forward_add(h, x, attn, n2s);  // h = x + attn
    const Tensor gate_up = b.gate_up.forward(n2);
    Tensor act = new_like({T, c.intermediate}, x);
    ops::swiglu_packed_forward(act, gate_up);
    x = b.down.forward_add(act, h);
  }
  if (logit_rows.numel() == 0) return Tensor::empty({0, c.vocab_size}, DType::f32, x.device());
  // Only the rows that sample: the final norm is per row, so normalizing them alone changes nothing.
  Tensor sel = new_like({logit_rows.numel(), c.hidden}, x);
  ops::gather_rows(sel, x, logit_rows);
  RMSNorm::Saved fs;
  const Tensor logits = lm_head_.forward(final_norm_.forward(sel, fs));
  if (logits_out) {
    VLM_CHECK(logits_out->dtype() == DType::f32 && logits_out->shape() == logits.shape(), "forward_paged: logits_out ",
              logits_out->describe(), " for logits ", logits.describe());
    ops::cast(*logits_out, logits);
    return *logits_out;
  }
  if (logits.dtype() == DType::f32) return logits;
  Tensor logits_f32 = new_f32_like(logits.shape(), logits);
  ops::cast(logits_f32, logits);
  return logits_f32;
}

}  // namespace vlm
