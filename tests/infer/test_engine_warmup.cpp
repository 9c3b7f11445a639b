// The engine's up-front CUDA-graph capture and decode-only detection on the CPU: capture_decode_graphs validates its
// sizes and captures nothing (no graphs on the CPU) without changing any answer, capture_graphs_at_start builds a
// working engine, and decoding_only fires only once every prompt is computed under chunked prefill (where counting
// generated tokens fires too early), after which each step computes one row per running sequence.
#include <gtest/gtest.h>

#include <map>

#include "engine_fixture.h"

namespace vlm::infer {
namespace {

using testing::EngineCase;
using testing::kImageToken;
using testing::make_engine_case;

EngineOptions cpu_options() {
  EngineOptions o = testing::small_engine_options();
  o.max_num_seqs = 16;
  return o;
}

void expect_expected_tokens(const EngineCase& ec, const std::vector<RequestOutput>& out, const char* what) {
  ASSERT_EQ(out.size(), ec.expected.size());
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(out[i].status.ok()) << what << " request " << i << ": " << out[i].status.message();
    EXPECT_EQ(out[i].completions.at(0).tokens, ec.expected[i]) << what << ": request " << i;
  }
}

TEST(EngineWarmup, CaptureIsAValidatedNoOpOnTheCpu) {
  EngineCase ec = make_engine_case(Device::cpu(), 3);
  EngineOptions o = cpu_options();
  o.capture_graphs_at_start = true;  // no graphs on the CPU: nothing to capture
  Engine engine(*ec.model, o);
  EXPECT_EQ(engine.stats().graphs, 0);
  const int ctx = static_cast<int>(engine.max_context());
  const Expected<DecodeGraphCapture> c = engine.capture_decode_graphs(decode_batch_buckets(16), 1, ctx);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->captured, 0);
  EXPECT_EQ(c->graphs, 0);
  // Bad sizes are named, whatever the device.
  struct Bad {
    std::vector<int> batches;
    int lo, hi;
  };
  for (const Bad& b : {Bad{{0}, 1, ctx}, Bad{{17}, 1, ctx}, Bad{{4, 3, -2}, 1, ctx}, Bad{{4}, 0, ctx},
                       Bad{{4}, 10, 5}, Bad{{4}, 1, ctx + 1}}) {
    const Expected<DecodeGraphCapture> e = engine.capture_decode_graphs(b.batches, b.lo, b.hi);
    ASSERT_FALSE(e.ok()) << b.lo << ".." << b.hi;
    EXPECT_EQ(e.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(e.status().message().find("capture_decode_graphs"), std::string::npos) << e.status().message();
  }
  expect_expected_tokens(ec, engine.generate(ec.requests), "after a capture on the CPU");
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.graphs, 0);
  EXPECT_EQ(s.graph_steps, 0);
  EXPECT_EQ(s.graph_capture_s, 0.0);
  EXPECT_GT(s.decode_steps, 0);
  EXPECT_LT(s.decode_steps, s.steps);  // the prompts' steps are not decode steps
}

TEST(EngineWarmup, DecodingOnlyWaitsForEveryPromptUnderChunkedPrefill) {
  EngineCase ec = make_engine_case(Device::cpu(), 2, /*max_new=*/12);
  EngineOptions o = cpu_options();
  o.max_tokens_per_step = 12;  // prompts arrive in chunks while the first requests already decode
  std::map<int64_t, int> tokens;  // per request number
  o.on_token = [&](const TokenEvent& e) { ++tokens[e.request]; };
  Engine engine(*ec.model, o);
  for (const Request& r : ec.requests) engine.add_request(r);
  const int64_t n = static_cast<int64_t>(ec.requests.size());
  auto every_request_has_a_token = [&] {
    for (int64_t r = 0; r < n; ++r)
      if (tokens[r] == 0) return false;
    return true;
  };
  bool count_fired_early = false, decoding = false;
  while (engine.has_unfinished() && !decoding) {
    const EngineStats before = engine.stats();
    engine.step();
    const EngineStats after = engine.stats();
    decoding = decoding_only(before, after);
    // The old test, "as many tokens as requests", passes while prompts are still being computed.
    count_fired_early = count_fired_early || (after.generated_tokens >= n && !every_request_has_a_token());
  }
  EXPECT_TRUE(count_fired_early) << "the case no longer chunks prompts behind decoding requests";
  ASSERT_TRUE(decoding) << "no decode-only step before the end";
  EXPECT_TRUE(every_request_has_a_token());
  EXPECT_EQ(engine.stats().waiting_seqs, 0);
  // From here each step computes one row per running sequence, and stays decode-only.
  int checked = 0;
  while (engine.has_unfinished()) {
    const EngineStats before = engine.stats();
    engine.step();
    const EngineStats after = engine.stats();
    if (after.steps == before.steps) continue;  // answers handed out without a forward
    EXPECT_EQ(after.rows - before.rows, before.running_seqs);
    EXPECT_TRUE(decoding_only(before, after));
    ++checked;
  }
  EXPECT_GT(checked, 0);
  // Two steps apart, or a step with nothing waiting that was not decode-only, never count.
  EngineStats a, b;
  b.steps = 2;
  b.decode_steps = 2;
  EXPECT_FALSE(decoding_only(a, b));
  b.steps = 1;
  b.decode_steps = 0;
  EXPECT_FALSE(decoding_only(a, b));
  b.decode_steps = 1;
  b.waiting_seqs = 1;
  EXPECT_FALSE(decoding_only(a, b));
  b.waiting_seqs = 0;
  EXPECT_TRUE(decoding_only(a, b));
}

}  // namespace
}  // namespace vlm::infer
