// ops::decoder_layer_decode's boundary (kernels/decode_layer.h): validates the layer's operands, runs the fused
// persistent kernel of cuda/decode_layer.cu where it applies, and otherwise the composition of the ops it fuses (the
// CPU reference, and CUDA calls the kernel does not take: prefill chunks, more rows, other dtypes or head dims, the
// step's first layer, which checks the tables).
#include "kernels/decode_layer.h"

#include <cmath>

#include "kernels/ops.h"
#include "kernels/ops/check.h"
#include "kernels/ops/paged_checks.h"

#ifdef VLM_HAVE_CUDA
#include "kernels/cuda/decode_layer.h"
#endif

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops/check.h

void decoder_layer_decode(Tensor& y, const Tensor& x, const DecoderLayerWeights& w, Tensor& k_cache, Tensor& v_cache,
                          const PagedStepTables& step, float theta, float scale, bool indices_checked) {
  const char* op = "decoder_layer_decode";
  const Device dev = x.device();
  const DType dt = check_norm_linear(op, x, w.attn_norm, w.qkv_w, w.qkv_b, dev);
  check_ndim(op, "x", x, 2);
  const int64_t rows = x.dim(0), hidden = x.dim(1);
  check_like(op, "y", y, dt, dev, x.shape());
  check_caches(op, k_cache, v_cache, dt, dev);
  check_disjoint(op, "y", y, "x", x);
  check_disjoint(op, "y", y, "k_cache", k_cache);
  check_disjoint(op, "y", y, "v_cache", v_cache);
  check_disjoint(op, "x", x, "k_cache", k_cache);
  check_disjoint(op, "x", x, "v_cache", v_cache);
  check_disjoint(op, "k_cache", k_cache, "v_cache", v_cache);
  const int64_t heads_kv = k_cache.dim(2), dim = k_cache.dim(3);
  VLM_CHECK(dim % 2 == 0 && w.qkv_w.dim(0) % dim == 0 && w.qkv_w.dim(0) / dim > 2 * heads_kv &&
                (w.qkv_w.dim(0) / dim - 2 * heads_kv) % heads_kv == 0,
            "ops::", op, ": qkv_w is ", w.qkv_w.describe(), ", k_cache is ", k_cache.describe(),
            " (expected [(Hq + 2 Hkv) D, E] with Hq a multiple of Hkv and D even)");
  const int64_t heads_q = w.qkv_w.dim(0) / dim - 2 * heads_kv;
  check_like(op, "o_w", w.o_w, dt, dev, Shape{hidden, heads_q * dim});
  check_optional(op, "o_b", w.o_b, dt, dev, Shape{hidden});
  check_norm_linear(op, x, w.mlp_norm, w.gate_up_w, w.gate_up_b, dev);
  VLM_CHECK(w.gate_up_w.dim(0) % 2 == 0, "ops::", op, ": gate_up_w is ", w.gate_up_w.describe(),
            ", expected [2 I, E]");
  const int64_t inter = w.gate_up_w.dim(0) / 2;
  check_like(op, "down_w", w.down_w, dt, dev, Shape{hidden, inter});
  check_optional(op, "down_b", w.down_b, dt, dev, Shape{hidden});
  VLM_CHECK(std::isfinite(theta) && theta >= 0.f && std::isfinite(scale), "ops::", op, ": theta is ", theta,
            ", scale is ", scale, " (expected theta >= 0, both finite)");
  if (theta > 0.f) check_i32_vector(op, "positions", step.positions, dev, rows);
  check_i32_vector(op, "slot_mapping", step.slot_mapping, dev, rows);
  check_paged_tables(op, step.block_tables, step.context_lens, step.cu_seqlens_q, step.max_seqlen_q,
                     step.max_context_len, dev);
#ifdef VLM_HAVE_CUDA
  if (dev.is_cuda() && indices_checked && step.max_seqlen_q <= 1) {
    const profile::OpRange range(op, dev);
    if (cuda::decoder_layer_decode(y, x, w, k_cache, v_cache, step, theta, scale)) return;
  }
#else
  if (dev.is_cuda()) no_cuda(op);
#endif
  Tensor q = temporary(Shape{rows, heads_q, dim}, dt, dev);
  rmsnorm_qkv_paged_write(q, k_cache, v_cache, x, w.attn_norm, w.attn_eps, w.qkv_w, w.qkv_b, step.positions,
                          step.slot_mapping, theta);
  Tensor attn = temporary(Shape{rows, heads_q, dim}, dt, dev);
  paged_attention(attn, q, k_cache, v_cache, step.block_tables, step.context_lens, step.cu_seqlens_q,
                  step.max_seqlen_q, step.max_context_len, scale, indices_checked);
  Tensor h = temporary(Shape{rows, hidden}, dt, dev);
  linear_add_forward(h, attn.view({rows, heads_q * dim}), w.o_w, w.o_b, x);
  Tensor act = temporary(Shape{rows, inter}, dt, dev);
  rmsnorm_linear_swiglu_forward(act, h, w.mlp_norm, w.mlp_eps, w.gate_up_w, w.gate_up_b);
  linear_add_forward(y, act, w.down_w, w.down_b, h);
}

}  // namespace vlm::ops
