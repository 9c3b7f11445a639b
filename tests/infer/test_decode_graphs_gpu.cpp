// DecodeGraphs on a CUDA device (label gpu; skipped without a device): a replayed decode step writes the same bits
// as the same ops run eagerly on the same padded inputs (programmatic dependent launch on, as in production), and
// its real rows match the unpadded eager step; the engine takes the graph path for decode steps and its greedy
// outputs equal full recomputation in fp32 with graphs on and off. Graphs captured up front (DecodeGraphs::capture,
// Engine::capture_decode_graphs, EngineOptions::capture_graphs_at_start) leave the KV cache untouched, replay the
// same bits, and a run after them captures nothing more and answers as without them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/philox.h"
#include "engine_fixture.h"
#include "infer/decode_graphs.h"
#include "infer/kv_cache.h"
#include "kernels/ops.h"
#include "model_fixture.h"

namespace vlm::infer {
namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

Tensor i32(const std::vector<int32_t>& v, Device d) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(d);
}

// A small decoder whose head dim (64) the paged decode kernel takes.
ModelConfig decode_config() {
  ModelConfig c = testing::tiny_config(/*tied=*/false, 0);
  c.text.hidden = 128;
  c.text.heads = 2;
  c.text.kv_heads = 1;
  c.text.intermediate = 256;
  c.text.max_seq_len = 512;
  return c;
}

struct StepCase {
  std::vector<int32_t> tokens, positions, slots, context_lens;
  std::vector<std::vector<int32_t>> blocks;
};

// Three sequences with contexts over several blocks; each decodes its last position.
StepCase make_step(int block_size, int vocab) {
  StepCase s;
  const int lens[] = {37, 5, 70};
  int32_t next_block = 1;  // block 0 stays for padding rows
  Philox rng(11, 0);
  for (int len : lens) {
    std::vector<int32_t> blocks;
    for (int p = 0; p < len; p += block_size) blocks.push_back(next_block++);
    const int pos = len - 1;
    s.tokens.push_back(static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(vocab))));
    s.positions.push_back(pos);
    s.slots.push_back(blocks[static_cast<size_t>(pos / block_size)] * block_size + pos % block_size);
    s.context_lens.push_back(len);
    s.blocks.push_back(blocks);
  }
  return s;
}

// The eager step over `rows` rows (the first from `s`, then padding as DecodeGraphs pads) with the context bound
// `ctx_bound`; returns f32 logits [rows, V] on the host.
Tensor eager_step(const TextDecoder& text, PagedKvCaches& caches, const StepCase& s, int rows, int ctx_bound,
                  int block_size, Device dev) {
  const int w = (ctx_bound + block_size - 1) / block_size;
  std::vector<int32_t> tokens(rows, 0), positions(rows, 0), slots(rows, -1), ctx(rows, 1), cu(rows + 1, 0),
      tables(static_cast<size_t>(rows * w), 0), logit_rows(rows);
  for (int i = 0; i < rows; ++i) {
    cu[i + 1] = i + 1;
    logit_rows[i] = i;
    if (i >= static_cast<int>(s.tokens.size())) continue;
    tokens[i] = s.tokens[i];
    positions[i] = s.positions[i];
    slots[i] = s.slots[i];
    ctx[i] = s.context_lens[i];
    std::copy(s.blocks[i].begin(), s.blocks[i].end(), tables.begin() + i * w);
  }
  PagedStep ps;
  ps.positions = i32(positions, dev);
  ps.slot_mapping = i32(slots, dev);
  ps.context_lens = i32(ctx, dev);
  ps.cu_seqlens_q = i32(cu, dev);
  ps.block_tables = Tensor::from_vector(tables, {rows, w}).to(dev);
  ps.max_seqlen_q = 1;
  ps.max_context_len = ctx_bound;
  const Tensor x0 = text.embed(i32(tokens, dev));
  return text.forward_paged(x0, ps, caches, i32(logit_rows, dev)).to(Device::cpu());
}

void fill_random(PagedKvCaches& caches, DType dtype, uint64_t seed) {
  for (std::vector<Tensor>* side : {&caches.k, &caches.v})
    for (Tensor& t : *side) {
      Tensor host = Tensor::empty(t.shape(), DType::f32);
      Philox rng(seed++, 0);
      for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = rng.normal();
      Tensor dev = host.to(t.device());
      if (dtype == DType::f32) {
        t.copy_from(dev);
      } else {
        ops::cast(t, dev);
      }
    }
}

TEST(DecodeGraphsGpu, ReplayEqualsTheEagerStepBitForBit) {
  SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  const int block_size = 16;
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const ModelConfig c = decode_config();
    VlmModel model(c, dev, dtype);
    model.init_weights(5);
    const TextDecoder& text = model.text_decoder();
    KvCache kv(kv_cache_shape(c.text, block_size, dtype), 16, dev);
    fill_random(kv.caches(), dtype, 21);
    const StepCase s = make_step(block_size, c.text.vocab_size);
    DecodeGraphs graphs(text, kv.caches(), dev, block_size, c.text.max_seq_len, 64, /*banned_id=*/-1);
    DecodeRows rows{s.tokens, s.positions, s.slots, s.context_lens, {}, 70};
    for (const auto& b : s.blocks) rows.blocks.push_back(&b);
    const int bk = decode_batch_bucket(3, 64), ck = decode_context_bucket(70, block_size, c.text.max_seq_len);
    ASSERT_EQ(bk, 4);
    ASSERT_EQ(ck, 256);
    // Twice: the first run captures, the second replays an existing graph.
    for (int round = 0; round < 2; ++round) {
      const DecodeGraphs::Outputs out = graphs.run(rows);
      const Tensor got = out.logits.to(Device::cpu());
      const Tensor ids = out.ids.to(Device::cpu());
      EXPECT_EQ(graphs.graphs(), 1u);
      const Tensor want = eager_step(text, kv.caches(), s, bk, ck, block_size, dev);
      ASSERT_EQ(got.shape(), Shape({3, c.text.vocab_size}));
      for (int64_t i = 0; i < got.numel(); ++i) ASSERT_FALSE(std::isnan(got.data<float>()[i])) << i;
      EXPECT_EQ(std::memcmp(got.data<float>(), want.data<float>(), got.nbytes()), 0) << "round " << round;
      for (int r = 0; r < 3; ++r) {
        const float* row = got.data<float>() + static_cast<int64_t>(r) * c.text.vocab_size;
        const int best = static_cast<int>(std::max_element(row, row + c.text.vocab_size) - row);
        EXPECT_EQ(ids.data<int32_t>()[r], best) << "row " << r;
      }
      // The real rows do not depend on the padding rows or the context bound.
      const Tensor plain = eager_step(text, kv.caches(), s, 3, 70, block_size, dev);
      double worst = 0;
      for (int64_t i = 0; i < got.numel(); ++i)
        worst = std::max(worst, std::abs(static_cast<double>(got.data<float>()[i]) - plain.data<float>()[i]) /
                                    (1.0 + std::abs(static_cast<double>(plain.data<float>()[i]))));
      EXPECT_LT(worst, dtype == DType::f32 ? 1e-5 : 3e-2);
    }
    // A larger batch and a longer context get graphs of their own.
    StepCase longer = s;
    longer.context_lens[1] = 300;
    longer.positions[1] = 299;
    longer.blocks[1].clear();
    for (int p = 0; p < 300; p += block_size) longer.blocks[1].push_back(static_cast<int32_t>(1 + (p / block_size) % 15));
    longer.slots[1] = longer.blocks[1].back() * block_size + 299 % block_size;
    DecodeRows rows2{longer.tokens, longer.positions, longer.slots, longer.context_lens, {}, 300};
    for (const auto& b : longer.blocks) rows2.blocks.push_back(&b);
    const Tensor got2 = graphs.run(rows2).logits.to(Device::cpu());
    EXPECT_EQ(graphs.graphs(), 2u);
    const Tensor want2 = eager_step(text, kv.caches(), longer, 4, 512, block_size, dev);
    EXPECT_EQ(std::memcmp(got2.data<float>(), want2.data<float>(), got2.nbytes()), 0);
  }
}

TEST(DecodeGraphsGpu, EngineDecodesFromGraphsAndMatchesFullRecompute) {
  SKIP_WITHOUT_CUDA();
  testing::EngineCase ec = testing::make_engine_case(Device::cuda(0), 2);
  for (bool graphs : {true, false}) {
    EngineOptions o;
    o.block_size = 4;
    o.kv_memory = 4096 * 512;
    o.image_token_id = testing::kImageToken;
    o.check_invariants = true;
    o.cuda_graphs = graphs;
    Engine engine(*ec.model, o);
    const std::vector<RequestOutput> out = engine.generate(ec.requests);
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_TRUE(out[i].status.ok()) << out[i].status.message();
      EXPECT_EQ(out[i].completions[0].tokens, ec.expected[i]) << "graphs " << graphs << " request " << i;
    }
    const EngineStats st = engine.stats();
    if (graphs) {
      EXPECT_GT(st.graph_steps, 0);
      EXPECT_GE(st.graphs, 1);
    } else {
      EXPECT_EQ(st.graph_steps, 0);
    }
  }
}

// The caches' bytes on the host, layer after layer, K then V.
std::vector<uint8_t> cache_bytes(PagedKvCaches& caches) {
  std::vector<uint8_t> out;
  for (std::vector<Tensor>* side : {&caches.k, &caches.v})
    for (const Tensor& t : *side) {
      const Tensor host = t.to(Device::cpu());
      const auto* p = static_cast<const uint8_t*>(host.raw_data());
      out.insert(out.end(), p, p + host.nbytes());
    }
  return out;
}

TEST(DecodeGraphsGpu, CaptureUpFrontWritesNoKvAndReplaysTheSameBits) {
  SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  const int block_size = 16;
  const ModelConfig c = decode_config();
  VlmModel model(c, dev, DType::bf16);
  model.init_weights(5);
  KvCache kv(kv_cache_shape(c.text, block_size, DType::bf16), 16, dev);
  fill_random(kv.caches(), DType::bf16, 21);
  const std::vector<uint8_t> before = cache_bytes(kv.caches());
  const StepCase s = make_step(block_size, c.text.vocab_size);
  DecodeRows rows{s.tokens, s.positions, s.slots, s.context_lens, {}, 70};
  for (const auto& b : s.blocks) rows.blocks.push_back(&b);
  // Lazily captured: the reference bits.
  DecodeGraphs lazy(model.text_decoder(), kv.caches(), dev, block_size, c.text.max_seq_len, 64, -1);
  const Tensor want = lazy.run(rows).logits.to(Device::cpu());
  // Captured up front, for this step's bucket and two others; all padding rows: the cache keeps its bytes.
  const std::vector<uint8_t> after_lazy = cache_bytes(kv.caches());
  DecodeGraphs early(model.text_decoder(), kv.caches(), dev, block_size, c.text.max_seq_len, 64, -1);
  EXPECT_TRUE(early.capture(3, 70));
  EXPECT_FALSE(early.capture(4, 256));  // the same bucket (4 rows, context 256)
  EXPECT_TRUE(early.capture(64, 512));
  EXPECT_TRUE(early.capture(1, 1));
  EXPECT_EQ(early.graphs(), 3u);
  EXPECT_GT(early.capture_seconds(), 0.0);
  EXPECT_EQ(cache_bytes(kv.caches()), after_lazy);
  // The step's own row writes its KV slot in both runs: the other bytes are the filled ones.
  EXPECT_NE(after_lazy, before);
  const Tensor got = early.run(rows).logits.to(Device::cpu());
  EXPECT_EQ(early.graphs(), 3u);  // replayed, not captured again
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_EQ(std::memcmp(got.data<float>(), want.data<float>(), got.nbytes()), 0);
}

TEST(DecodeGraphsGpu, EngineWarmedUpCapturesNothingMoreAndAnswersTheSame) {
  SKIP_WITHOUT_CUDA();
  testing::EngineCase ec = testing::make_engine_case(Device::cuda(0), 2);
  EngineOptions o;
  o.block_size = 4;
  o.kv_memory = 4096 * 512;
  o.image_token_id = testing::kImageToken;
  o.check_invariants = true;
  o.max_num_seqs = 16;
  auto expect_expected = [&](const std::vector<RequestOutput>& out, const char* what) {
    ASSERT_EQ(out.size(), ec.expected.size());
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_TRUE(out[i].status.ok()) << what << ": " << out[i].status.message();
      EXPECT_EQ(out[i].completions[0].tokens, ec.expected[i]) << what << " request " << i;
    }
  };
  // Not warmed up: the graphs come on first use.
  Engine cold(*ec.model, o);
  expect_expected(cold.generate(ec.requests), "cold");
  const EngineStats cs = cold.stats();
  ASSERT_GT(cs.graphs, 0);
  // Warmed up for every batch and context of the run: the same tokens, no capture during the run.
  Engine warm(*ec.model, o);
  const int ctx = static_cast<int>(warm.max_context());
  const Expected<DecodeGraphCapture> c = warm.capture_decode_graphs(decode_batch_buckets(o.max_num_seqs), 1, ctx);
  ASSERT_TRUE(c.ok()) << c.status().message();
  // max_context 96 with blocks of 4 is one context bucket; batch buckets 1, 2, 4, 8, 16.
  EXPECT_EQ(c->captured, 5);
  EXPECT_EQ(c->graphs, 5);
  EXPECT_GT(c->seconds, 0.0);
  EXPECT_EQ(warm.stats().graphs, c->graphs);
  const Expected<DecodeGraphCapture> again = warm.capture_decode_graphs({3, 4}, 1, ctx);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->captured, 0);  // kept, not captured again
  const double capture_s = warm.stats().graph_capture_s;
  expect_expected(warm.generate(ec.requests), "warm");
  const EngineStats ws = warm.stats();
  EXPECT_EQ(ws.graphs, c->graphs);
  EXPECT_EQ(ws.graph_capture_s, capture_s);
  EXPECT_EQ(ws.graph_steps, cs.graph_steps);
  EXPECT_EQ(ws.blocks.used, 0);
  // Captured between steps, requests running: their KV stays, their answers too.
  Engine mid(*ec.model, o);
  for (const Request& r : ec.requests) mid.add_request(r);
  std::vector<RequestOutput> out(ec.requests.size());
  for (int step = 0; mid.has_unfinished(); ++step) {
    if (step == 3) {
      const Expected<DecodeGraphCapture> m = mid.capture_decode_graphs(decode_batch_buckets(o.max_num_seqs), 1, ctx);
      ASSERT_TRUE(m.ok());
    }
    for (RequestOutput& r : mid.step()) out[static_cast<size_t>(r.request)] = std::move(r);
  }
  expect_expected(out, "captured mid-run");
  EXPECT_EQ(mid.stats().graphs, 5);
  // At construction: every bucket up to max_num_seqs.
  EngineOptions at_start = o;
  at_start.capture_graphs_at_start = true;
  Engine started(*ec.model, at_start);
  EXPECT_EQ(started.stats().graphs, 5);
  expect_expected(started.generate(ec.requests), "captured at start");
  EXPECT_EQ(started.stats().graphs, 5);
}

}  // namespace
}  // namespace vlm::infer
