// decoder_layer_decode's CPU reference and boundary: the op equals the composition it documents (rmsnorm_qkv_paged_write,
// paged_attention, linear_add_forward, rmsnorm_linear_swiglu_forward, linear_add_forward) bit for bit, K/V rows
// included, over decode and prefill-chunk tables with and without biases and RoPE; bad operands abort naming the op
// and the tensor. The fused CUDA kernel is compared with this composition in cuda/test_cuda_decode_layer.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/decode_layer.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/paged_inputs.h"

namespace vlm::testing {
namespace {

constexpr float kEps = 1e-5f;

ops::DecoderLayerWeights random_weights(int64_t hidden, int64_t heads_q, int64_t heads_kv, int64_t dim, int64_t inter,
                                        bool bias, uint64_t seed) {
  const int64_t qkv = (heads_q + 2 * heads_kv) * dim;
  ops::DecoderLayerWeights w;
  w.attn_norm = random_normal({hidden}, seed++);
  w.attn_eps = kEps;
  w.qkv_w = random_normal({qkv, hidden}, seed++);
  w.o_w = random_normal({hidden, heads_q * dim}, seed++);
  w.mlp_norm = random_normal({hidden}, seed++);
  w.mlp_eps = kEps;
  w.gate_up_w = random_normal({2 * inter, hidden}, seed++);
  w.down_w = random_normal({hidden, inter}, seed++);
  if (bias) {
    w.qkv_b = random_normal({qkv}, seed++);
    w.o_b = random_normal({hidden}, seed++);
    w.gate_up_b = random_normal({2 * inter}, seed++);
    w.down_b = random_normal({hidden}, seed++);
  }
  return w;
}

TEST(DecoderLayerDecode, EqualsTheComposition) {
  uint64_t seed = 900;
  const int64_t hidden = 24, heads_q = 4, heads_kv = 2, dim = 8, inter = 40;
  const std::vector<std::vector<int32_t>> query_lens = {{1}, {1, 1, 1}, {3, 1}};  // decode, and a prefill chunk
  const std::vector<std::vector<int32_t>> context_lens = {{9}, {1, 6, 13}, {7, 12}};
  for (size_t k = 0; k < query_lens.size(); ++k)
    for (float theta : {10000.f, 0.f})
      for (bool bias : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "case " << k << " theta " << theta << " bias " << bias);
        const PagedCase pc{"layer", context_lens[k], query_lens[k], heads_q, heads_kv, dim, 4};
        const PagedInputs in = make_paged_inputs(pc, seed++);
        const ops::DecoderLayerWeights w = random_weights(hidden, heads_q, heads_kv, dim, inter, bias, seed);
        seed += 16;
        const int64_t rows = in.q.dim(0);
        const Tensor x = random_normal({rows, hidden}, seed++);
        std::vector<int32_t> pos, slots;
        for (size_t b = 0; b < context_lens[k].size(); ++b)
          for (int32_t i = 0; i < query_lens[k][b]; ++i) {
            const int32_t p = context_lens[k][b] - query_lens[k][b] + i;
            pos.push_back(p);
            slots.push_back(static_cast<int32_t>(in.slots[b][static_cast<size_t>(p)]));
          }
        const Tensor positions = i32_tensor(pos), slot_mapping = i32_tensor(slots);

        Tensor k_want = in.k_cache.clone(), v_want = in.v_cache.clone();
        Tensor q = Tensor::empty({rows, heads_q, dim}, DType::f32), attn = Tensor::empty(q.shape(), DType::f32);
        ops::rmsnorm_qkv_paged_write(q, k_want, v_want, x, w.attn_norm, kEps, w.qkv_w, w.qkv_b, positions,
                                     slot_mapping, theta);
        ops::paged_attention(attn, q, k_want, v_want, in.block_tables, in.context_lens, in.cu_q, in.max_q,
                             in.max_ctx, in.scale);
        Tensor h = Tensor::empty({rows, hidden}, DType::f32), act = Tensor::empty({rows, inter}, DType::f32);
        ops::linear_add_forward(h, attn.view({rows, heads_q * dim}), w.o_w, w.o_b, x);
        ops::rmsnorm_linear_swiglu_forward(act, h, w.mlp_norm, kEps, w.gate_up_w, w.gate_up_b);
        Tensor y_want = Tensor::empty({rows, hidden}, DType::f32);
        ops::linear_add_forward(y_want, act, w.down_w, w.down_b, h);

        Tensor k_got = in.k_cache.clone(), v_got = in.v_cache.clone(), y = nan_tensor({rows, hidden});
        const ops::PagedStepTables tables{positions, slot_mapping, in.block_tables, in.context_lens, in.cu_q,
                                          in.max_q,  in.max_ctx};
        ops::decoder_layer_decode(y, x, w, k_got, v_got, tables, theta, in.scale, /*indices_checked=*/false);
        EXPECT_TRUE(bitwise_equal(y, y_want));
        EXPECT_TRUE(bitwise_equal(k_got, k_want));
        EXPECT_TRUE(bitwise_equal(v_got, v_want));
      }
}

TEST(DecoderLayerDecodeDeathTest, BoundaryNamesTheTensor) {
  const int64_t hidden = 16, heads_q = 2, heads_kv = 1, dim = 8, inter = 12;
  const PagedCase pc{"layer", {5}, {1}, heads_q, heads_kv, dim, 4};
  const PagedInputs in = make_paged_inputs(pc, 11);
  const ops::DecoderLayerWeights good = random_weights(hidden, heads_q, heads_kv, dim, inter, false, 20);
  const Tensor x = random_normal({1, hidden}, 30), positions = i32_tensor({4});
  const Tensor slots = i32_tensor({static_cast<int32_t>(in.slots[0][4])});
  const ops::PagedStepTables tables{positions, slots, in.block_tables, in.context_lens, in.cu_q, 1, in.max_ctx};
  auto call = [&](const ops::DecoderLayerWeights& w, Tensor& y, const Tensor& xin) {
    Tensor k = in.k_cache.clone(), v = in.v_cache.clone();
    ops::decoder_layer_decode(y, xin, w, k, v, tables, 10000.f, in.scale, false);
  };
  Tensor y = Tensor::empty({1, hidden}, DType::f32);
  ops::DecoderLayerWeights bad_o = good;
  bad_o.o_w = random_normal({hidden, heads_q * dim + 1}, 40);
  EXPECT_DEATH(call(bad_o, y, x), "decoder_layer_decode: o_w is f32\\[16, 17\\] cpu");
  ops::DecoderLayerWeights bad_down = good;
  bad_down.down_w = random_normal({hidden, inter + 2}, 41);
  EXPECT_DEATH(call(bad_down, y, x), "decoder_layer_decode: down_w is f32\\[16, 14\\] cpu");
  ops::DecoderLayerWeights odd_gate_up = good;
  odd_gate_up.gate_up_w = random_normal({2 * inter + 1, hidden}, 42);
  EXPECT_DEATH(call(odd_gate_up, y, x), "decoder_layer_decode: gate_up_w is f32\\[25, 16\\] cpu");
  ops::DecoderLayerWeights bad_qkv = good;
  bad_qkv.qkv_w = random_normal({(heads_q + 2 * heads_kv) * dim + 3, hidden}, 43);
  EXPECT_DEATH(call(bad_qkv, y, x), "decoder_layer_decode: qkv_w is f32\\[35, 16\\] cpu");
  Tensor y_short = Tensor::empty({1, hidden - 1}, DType::f32);
  EXPECT_DEATH(call(good, y_short, x), "decoder_layer_decode: y is");
  Tensor same = x.clone();
  EXPECT_DEATH(call(good, same, same), "decoder_layer_decode: y .* overlaps x");
  call(good, y, x);  // the right operands pass
}

}  // namespace
}  // namespace vlm::testing
