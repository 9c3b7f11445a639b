// The engine on a CUDA device in fp32 (label gpu; skipped without a device): greedy outputs equal full-recompute
// greedy decoding on the same device, with the prefix cache on and off, through preemption and forks.
#include <gtest/gtest.h>

#include "engine_fixture.h"

namespace vlm::infer {
namespace {

using testing::EngineCase;
using testing::kImageToken;
using testing::make_engine_case;

#define SKIP_WITHOUT_CUDA() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

TEST(EngineGpu, GreedyEqualsFullRecomputeInFp32) {
  SKIP_WITHOUT_CUDA();
  EngineCase ec = make_engine_case(Device::cuda(0), 1);
  struct Variant {
    const char* name;
    bool cache;
    int64_t kv_blocks;
    int step_tokens;
    int n;
  };
  for (const Variant& v : {Variant{"cache on", true, 4096, 2048, 1}, Variant{"cache off", false, 4096, 2048, 1},
                           Variant{"preempted", true, 16, 7, 1}, Variant{"forks", true, 40, 2048, 3}}) {
    EngineOptions o;
    o.block_size = 4;
    o.kv_memory = v.kv_blocks * 512;
    o.max_tokens_per_step = v.step_tokens;
    o.prefix_cache = v.cache;
    o.image_token_id = kImageToken;
    o.check_invariants = true;
    Engine engine(*ec.model, o);
    std::vector<Request> reqs = ec.requests;
    for (Request& r : reqs) r.sampling.n = v.n;
    const std::vector<RequestOutput> out = engine.generate(reqs);
    for (size_t i = 0; i < out.size(); ++i) {
      ASSERT_TRUE(out[i].status.ok()) << v.name << ": " << out[i].status.message();
      for (const Completion& c : out[i].completions) EXPECT_EQ(c.tokens, ec.expected[i]) << v.name << " request " << i;
    }
    EXPECT_EQ(engine.stats().blocks.used, 0) << v.name;
  }
}

TEST(EngineGpu, BeamSearchEqualsFullRecomputeBeamSearchInFp32) {
  SKIP_WITHOUT_CUDA();
  EngineCase ec = make_engine_case(Device::cuda(0), 8);
  EngineOptions o;
  o.block_size = 4;
  o.kv_memory = 14 * 512;  // tight: beams are preempted
  o.max_tokens_per_step = 9;
  o.image_token_id = kImageToken;
  o.check_invariants = true;
  Engine engine(*ec.model, o);
  std::vector<Request> reqs;
  for (size_t i : {size_t{0}, size_t{2}, size_t{7}}) {  // the text-only prompts
    Request r = ec.requests[i];
    r.sampling.beam_width = 3;
    r.sampling.n = 3;
    r.sampling.max_tokens = 7;
    reqs.push_back(r);
  }
  const std::vector<RequestOutput> out = engine.generate(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(out[i].status.ok()) << out[i].status.message();
    const auto want = testing::reference_beam_search(*ec.model, reqs[i].prompt, 3, 7, 1.f);
    ASSERT_EQ(out[i].completions.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(out[i].completions[k].tokens, want[k].tokens) << i << "/" << k;
  }
  EXPECT_EQ(engine.stats().blocks.used, 0);
}

}  // namespace
}  // namespace vlm::infer
