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

}  // namespace
}  // namespace vlm::infer
