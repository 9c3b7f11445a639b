// decoder_layer_decode on CUDA: the persistent fused kernel (cuda/decode_layer.cu) against the unfused CUDA
// composition of the same op (the same device tensors, bit for bit: the kernel reuses the GEMV's and the decode
// attention's device code) and against the CPU reference (fp32 composition on the bf16-rounded inputs, within a bound
// for bf16's intermediate roundings). Cases: SmolLM2-135M's shape (9 q heads over 3 kv heads), a group of 8, a group
// of 1; batches of 1, 3 and 8 rows; contexts from 1 key to past a split, under a context bound with empty splits; a
// padding row (slot -1). The caches' unread slots are NaN (make_paged_inputs), every output starts NaN (Guarded), and
// the call runs twice to show the barrier and the tickets reset.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/decode_layer.h"
#include "kernels/decode_layer.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/paged_inputs.h"

namespace vlm::testing {
namespace {

struct Case {
  const char* name;
  std::vector<int32_t> context_lens;  // one decode row per sequence
  int64_t hidden, heads_q, heads_kv, inter;
  int max_context;  // the bound the call is made with (a CUDA graph's context bucket)
  bool pad_last;    // the last row is a padding row: slot -1, as the decode graphs pad a batch
  bool bias;
};
const Case kCases[] = {
    {"smollm2 b1", {700}, 576, 9, 3, 1536, 1024, false, false},
    {"smollm2 b3", {1, 40, 513}, 576, 9, 3, 1536, 1024, false, false},
    {"group 8 b8", {5, 17, 64, 65, 300, 129, 2, 33}, 256, 8, 1, 512, 512, true, true},
    {"group 1 b2", {260, 31}, 128, 2, 2, 256, 256, false, true},
};

constexpr float kEps = 1e-5f;
constexpr float kTheta = 100000.f;

struct Layer {
  Tensor attn_norm, qkv_w, qkv_b, o_w, o_b, mlp_norm, gate_up_w, gate_up_b, down_w, down_b;  // CPU f32
};

Layer random_layer(const Case& c, uint64_t seed) {
  const int64_t D = 64, qkv = (c.heads_q + 2 * c.heads_kv) * D;
  auto scaled = [](Tensor t, float s) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] *= s;
    return t;
  };
  Layer l;
  l.attn_norm = scaled(random_normal({c.hidden}, seed++), 0.3f);
  l.qkv_w = scaled(random_normal({qkv, c.hidden}, seed++), 1.f / std::sqrt(static_cast<float>(c.hidden)));
  l.o_w = scaled(random_normal({c.hidden, c.heads_q * D}, seed++), 1.f / std::sqrt(static_cast<float>(c.heads_q * D)));
  l.mlp_norm = scaled(random_normal({c.hidden}, seed++), 0.3f);
  l.gate_up_w = scaled(random_normal({2 * c.inter, c.hidden}, seed++), 1.f / std::sqrt(static_cast<float>(c.hidden)));
  l.down_w = scaled(random_normal({c.hidden, c.inter}, seed++), 1.f / std::sqrt(static_cast<float>(c.inter)));
  if (c.bias) {
    l.qkv_b = scaled(random_normal({qkv}, seed++), 0.1f);
    l.o_b = scaled(random_normal({c.hidden}, seed++), 0.1f);
    l.gate_up_b = scaled(random_normal({2 * c.inter}, seed++), 0.1f);
    l.down_b = scaled(random_normal({c.hidden}, seed++), 0.1f);
  }
  return l;
}

// The layer's weights as `convert` makes each tensor (an undefined bias stays undefined).
template <class F>
ops::DecoderLayerWeights weights(const Layer& l, F convert) {
  using W = ops::DecoderLayerWeights;
  const std::pair<Tensor W::*, const Tensor Layer::*> parts[] = {
      {&W::attn_norm, &Layer::attn_norm}, {&W::qkv_w, &Layer::qkv_w},         {&W::qkv_b, &Layer::qkv_b},
      {&W::o_w, &Layer::o_w},             {&W::o_b, &Layer::o_b},             {&W::mlp_norm, &Layer::mlp_norm},
      {&W::gate_up_w, &Layer::gate_up_w}, {&W::gate_up_b, &Layer::gate_up_b}, {&W::down_w, &Layer::down_w},
      {&W::down_b, &Layer::down_b}};
  W w;
  for (const auto& [dst, src] : parts) w.*dst = (l.*src).defined() ? convert(l.*src) : Tensor();
  w.attn_eps = w.mlp_eps = kEps;
  return w;
}

// The step's tables (CPU i32) for one decode row per sequence at its last position.
struct Tables {
  Tensor positions, slots, block_tables, context_lens, cu_q;
};
Tables step_tables(const Case& c, const PagedInputs& in) {
  std::vector<int32_t> pos, slots;
  for (size_t b = 0; b < c.context_lens.size(); ++b) {
    const int32_t p = c.context_lens[b] - 1;
    pos.push_back(p);
    const bool pad = c.pad_last && b + 1 == c.context_lens.size();
    slots.push_back(pad ? -1 : static_cast<int32_t>(in.slots[b][static_cast<size_t>(p)]));
  }
  return {i32_tensor(pos), i32_tensor(slots), in.block_tables, in.context_lens, in.cu_q};
}

Tensor on_gpu_i32(const Tensor& t) {
  std::vector<int32_t> v(t.data<int32_t>(), t.data<int32_t>() + t.numel());
  Tensor g = gpu_i32(v);
  return t.ndim() == 2 ? g.view({t.dim(0), t.dim(1)}) : g;
}

TEST(CudaDecoderLayer, FusedEqualsTheCompositionAndMatchesCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 7000;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const int64_t rows = static_cast<int64_t>(c.context_lens.size()), D = 64;
    const PagedCase pc{c.name, c.context_lens, std::vector<int32_t>(c.context_lens.size(), 1), c.heads_q, c.heads_kv,
                       D, 16};
    const PagedInputs in = make_paged_inputs(pc, seed++);
    const Layer layer = random_layer(c, seed);
    seed += 16;
    const Tensor x = random_normal({rows, c.hidden}, seed++);
    const Tables t = step_tables(c, in);
    const float scale = 1.f / std::sqrt(static_cast<float>(D));

    // The CPU reference: the composition in fp32 on the bf16-rounded inputs.
    const DType bf = DType::bf16;
    Tensor k_ref = rounded(in.k_cache, bf), v_ref = rounded(in.v_cache, bf);
    Tensor y_ref = Tensor::empty({rows, c.hidden}, DType::f32);
    const ops::PagedStepTables cpu_tables{t.positions,    t.slots, t.block_tables, t.context_lens,
                                          t.cu_q,         1,       c.max_context};
    ops::decoder_layer_decode(y_ref, rounded(x, bf), weights(layer, [&](const Tensor& w) { return rounded(w, bf); }),
                              k_ref, v_ref, cpu_tables, kTheta, scale, /*indices_checked=*/false);

    const ops::DecoderLayerWeights gw = weights(layer, [&](const Tensor& w) { return to_gpu(w, bf); });
    const Tensor gx = to_gpu(x, bf);
    const Tensor gpos = on_gpu_i32(t.positions), gslots = on_gpu_i32(t.slots), gtab = on_gpu_i32(t.block_tables),
                 glen = on_gpu_i32(t.context_lens), gcu = on_gpu_i32(t.cu_q);
    const ops::PagedStepTables gpu_tables{gpos, gslots, gtab, glen, gcu, 1, c.max_context};

    // The unfused CUDA composition (the op with unchecked tables never fuses).
    Tensor k_comp = to_gpu(in.k_cache, bf), v_comp = to_gpu(in.v_cache, bf);
    Guarded y_comp(Shape{rows, c.hidden}, bf);
    ops::decoder_layer_decode(y_comp.view(), gx, gw, k_comp, v_comp, gpu_tables, kTheta, scale, false);

    for (int run = 0; run < 2; ++run) {
      SCOPED_TRACE(::testing::Message() << "run " << run);
      Tensor k_fused = to_gpu(in.k_cache, bf), v_fused = to_gpu(in.v_cache, bf);
      Guarded y_fused(Shape{rows, c.hidden}, bf);
      ASSERT_TRUE(ops::cuda::decoder_layer_decode(y_fused.view(), gx, gw, k_fused, v_fused, gpu_tables, kTheta, scale))
          << "the fused kernel did not take the call";
      EXPECT_TRUE(y_fused.guards_intact());
      EXPECT_TRUE(bitwise_equal(to_cpu_f32(y_fused.view()), to_cpu_f32(y_comp.view()))) << "y";
      EXPECT_TRUE(bitwise_equal(to_cpu_f32(k_fused), to_cpu_f32(k_comp))) << "k_cache";
      EXPECT_TRUE(bitwise_equal(to_cpu_f32(v_fused), to_cpu_f32(v_comp))) << "v_cache";
      // Against the CPU: bf16 roundings of q, k, v, the attention output, h and act move y by a few ulps of the
      // values they pass through (about 2^-8 relative each), scaled by the row's size.
      EXPECT_TRUE(close_scaled(y_fused, y_ref, 3e-2, 2e-2, 1e-3)) << "fused vs the CPU reference";
    }
  }
}

}  // namespace
}  // namespace vlm::testing
