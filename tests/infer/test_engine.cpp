// The engine on the CPU: its greedy outputs equal full-recompute greedy decoding (generate_greedy) token for token
// with the prefix cache on and off, with chunked prefill, through preemption (a tiny KV budget) and through forks
// (n > 1); every block is free once all requests finish; bad requests fail alone; seeded sampling (on the host and
// on the device) repeats whatever shares the batch; stop ids and stop strings end generation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <utility>

#include "engine_fixture.h"
#include "infer/prefix_hash.h"
#include "model/generate.h"
#include "testing/test_util.h"

namespace vlm::infer {
namespace {

using testing::EngineCase;
using testing::Hypothesis;
using testing::kImageToken;
using testing::make_engine_case;
using testing::reference_beam_search;

EngineOptions base_options() { return testing::small_engine_options(); }

void expect_greedy_equal(const EngineCase& ec, const std::vector<RequestOutput>& out, const char* what) {
  ASSERT_EQ(out.size(), ec.expected.size());
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(out[i].status.ok()) << what << " request " << i << ": " << out[i].status.message();
    ASSERT_EQ(out[i].completions.size(), 1u);
    EXPECT_EQ(out[i].completions[0].tokens, ec.expected[i]) << what << ": request " << i;
    EXPECT_EQ(out[i].completions[0].finish_reason, "length");
    EXPECT_TRUE(out[i].completions[0].logprobs.empty());  // not asked for
  }
}

void expect_all_blocks_free(const Engine& e) {
  const EngineStats s = e.stats();
  EXPECT_EQ(s.blocks.used, 0);
  EXPECT_EQ(s.blocks.free, s.blocks.total);
}

TEST(Engine, GreedyEqualsFullRecomputeWithAndWithoutThePrefixCache) {
  EngineCase ec = make_engine_case(Device::cpu(), 1);
  for (bool cache : {true, false}) {
    EngineOptions o = base_options();
    o.prefix_cache = cache;
    Engine engine(*ec.model, o);
    expect_greedy_equal(ec, engine.generate(ec.requests), cache ? "cache on" : "cache off");
    // Again through the same engine: the prompts' full blocks are now cached (when on), the answers unchanged.
    expect_greedy_equal(ec, engine.generate(ec.requests), cache ? "cache on, warm" : "cache off, again");
    const EngineStats s = engine.stats();
    if (cache) {
      EXPECT_GT(s.prefix_hit_tokens, 0);
      EXPECT_GT(s.image_cache_hits, 0);
    } else {
      EXPECT_EQ(s.prefix_hit_tokens, 0);
    }
    expect_all_blocks_free(engine);
  }
}

// Plain greedy steps pick on the device (ops::argmax_rows); a step with any request that needs the logits (here
// log-probabilities on every other request) samples all of them on the host. Both give the oracle's tokens.
TEST(Engine, DevicePickAndHostSamplerAgreeOnGreedy) {
  EngineCase ec = make_engine_case(Device::cpu(), 4);
  std::vector<Request> mixed = ec.requests;
  for (size_t i = 0; i < mixed.size(); i += 2) mixed[i].sampling.logprobs = 0;
  Engine engine(*ec.model, base_options());
  const std::vector<RequestOutput> out = engine.generate(mixed);
  ASSERT_EQ(out.size(), ec.expected.size());
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(out[i].status.ok()) << out[i].status.message();
    EXPECT_EQ(out[i].completions[0].tokens, ec.expected[i]) << "request " << i;
    EXPECT_EQ(out[i].completions[0].logprobs.size(), i % 2 == 0 ? ec.expected[i].size() : 0u);
  }
  expect_greedy_equal(ec, engine.generate(ec.requests), "all plain greedy");
}

TEST(Engine, GreedyEqualsFullRecomputeThroughPreemptionAndChunkedPrefill) {
  EngineCase ec = make_engine_case(Device::cpu(), 2);
  for (bool cache : {true, false}) {
    EngineOptions o = base_options();
    o.prefix_cache = cache;
    o.kv_memory = 16 * 512;  // 16 blocks of 4 tokens (2 layers, 2 KV heads of 4, f32): the longest request needs 13
    o.max_tokens_per_step = 7;
    Engine engine(*ec.model, o);
    ASSERT_EQ(engine.num_blocks(), 16);
    expect_greedy_equal(ec, engine.generate(ec.requests), cache ? "preempted, cache on" : "preempted, cache off");
    EXPECT_GT(engine.stats().preemptions, 0);
    expect_all_blocks_free(engine);
  }
}

TEST(Engine, ForkedCompletionsEachEqualGreedyAndShareThePrompt) {
  EngineCase ec = make_engine_case(Device::cpu(), 3);
  EngineOptions o = base_options();
  o.kv_memory = 40 * 512;  // tight enough that forks preempt each other at times
  Engine engine(*ec.model, o);
  std::vector<Request> reqs = ec.requests;
  for (Request& r : reqs) r.sampling.n = 3;
  const std::vector<RequestOutput> out = engine.generate(reqs);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(out[i].status.ok()) << out[i].status.message();
    ASSERT_EQ(out[i].completions.size(), 3u);
    for (const Completion& c : out[i].completions) EXPECT_EQ(c.tokens, ec.expected[i]) << "request " << i;
  }
  expect_all_blocks_free(engine);
}

// `r` answered alone, and inserted at `at` among `neighbours` on an engine whose small KV and token budgets preempt
// and chunk; checks that the crowded engine frees every block.
std::pair<RequestOutput, RequestOutput> alone_and_crowded(const EngineCase& ec, const Request& r,
                                                          std::vector<Request> neighbours, size_t at) {
  Engine alone(*ec.model, base_options());
  RequestOutput a = alone.generate({r})[0];
  EngineOptions tight = base_options();
  tight.kv_memory = 20 * 512;
  tight.max_tokens_per_step = 5;
  Engine crowded(*ec.model, tight);
  neighbours.insert(neighbours.begin() + static_cast<std::ptrdiff_t>(at), r);
  RequestOutput b = crowded.generate(neighbours)[at];
  expect_all_blocks_free(crowded);
  return {std::move(a), std::move(b)};
}

TEST(Engine, SeededSamplingRepeatsWhateverSharesTheBatch) {
  EngineCase ec = make_engine_case(Device::cpu(), 4);
  Request r = ec.requests[4];
  r.sampling.temperature = 1.3f;
  r.sampling.top_p = 0.9f;
  r.sampling.seed = 99;
  r.sampling.n = 2;
  r.sampling.logprobs = 3;
  const auto [a, b] = alone_and_crowded(ec, r, ec.requests, 2);
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  ASSERT_EQ(a.completions.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(a.completions[k].tokens, b.completions[k].tokens);
    ASSERT_EQ(a.completions[k].top_logprobs.size(), a.completions[k].tokens.size());
    EXPECT_EQ(a.completions[k].top_logprobs[0].size(), 3u);
    ASSERT_EQ(a.completions[k].logprobs.size(), a.completions[k].tokens.size());
    for (float lp : a.completions[k].logprobs) EXPECT_LE(lp, 0.f);
  }
  EXPECT_NE(a.completions[0].tokens, a.completions[1].tokens);  // each completion has its own stream
}

// Plain temperature rows are picked on the device (ops::gumbel_argmax_rows) beside rows the host samples (top-p): a
// seeded request gives the same tokens alone and in such a mixed, preempting batch, and its forks differ.
TEST(Engine, DeviceSampledTemperatureRepeatsBesideHostSampledRows) {
  EngineCase ec = make_engine_case(Device::cpu(), 4);
  Request r = ec.requests[3];
  r.sampling.temperature = 0.9f;
  r.sampling.seed = 7;
  r.sampling.n = 2;
  std::vector<Request> neighbours = ec.requests;
  for (size_t i = 0; i < neighbours.size(); i += 2) {  // host-sampled
    neighbours[i].sampling.temperature = 1.f;
    neighbours[i].sampling.top_p = 0.8f;
  }
  const auto [a, b] = alone_and_crowded(ec, r, neighbours, 1);
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  ASSERT_EQ(a.completions.size(), 2u);
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(a.completions[k].tokens, b.completions[k].tokens) << "completion " << k;
  EXPECT_NE(a.completions[0].tokens, a.completions[1].tokens);
}

TEST(Engine, BadRequestsFailAloneWithClearErrors) {
  EngineCase ec = make_engine_case(Device::cpu(), 5);
  std::vector<Request> batch = ec.requests;
  auto bad = [&](const std::string& id, auto edit) {
    Request r = ec.requests[1];  // has one image
    r.id = id;
    edit(r);
    return r;
  };
  const std::vector<std::pair<Request, std::string>> cases = {
      {bad("long", [](Request& r) { r.prompt.resize(200, 3); }), "context holds 96"},
      {bad("zero", [](Request& r) { r.sampling.max_tokens = 0; }), "max_tokens"},
      {bad("negative", [](Request& r) { r.sampling.max_tokens = -4; }), "max_tokens"},
      {bad("shape",
           [](Request& r) {
             r.images[0].pixels = Tensor::zeros({3, 8, 8}, DType::f32);
           }),
       "image 0"},
      {bad("count", [](Request& r) { r.images.clear(); }), "image placeholders"},
      {bad("vocab", [](Request& r) { r.prompt[0] = 1000; }), "outside the vocabulary"},
      {bad("empty",
           [](Request& r) {
             r.prompt.clear();
             r.images.clear();
           }),
       "empty"},
      {bad("temperature", [](Request& r) { r.sampling.temperature = -1; }), "temperature"},
  };
  std::vector<size_t> bad_at;
  for (size_t i = 0; i < cases.size(); ++i) {
    bad_at.push_back(2 * i + 1);
    batch.insert(batch.begin() + static_cast<std::ptrdiff_t>(2 * i + 1), cases[i].first);
  }
  Engine engine(*ec.model, base_options());
  const std::vector<RequestOutput> out = engine.generate(batch);
  size_t good = 0, k = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (k < bad_at.size() && i == bad_at[k]) {
      EXPECT_FALSE(out[i].status.ok()) << cases[k].first.id;
      EXPECT_NE(out[i].status.message().find("request '" + cases[k].first.id + "'"), std::string::npos)
          << out[i].status.message();
      EXPECT_NE(out[i].status.message().find(cases[k].second), std::string::npos) << out[i].status.message();
      ++k;
      continue;
    }
    ASSERT_TRUE(out[i].status.ok()) << out[i].status.message();
    EXPECT_EQ(out[i].completions[0].tokens, ec.expected[good]) << "good request " << good;
    ++good;
  }
  EXPECT_EQ(good, ec.expected.size());
  expect_all_blocks_free(engine);
}

// Two encodings of equal length and equal leading bytes, differing at the end.
std::string encoded(char last) {
  std::string s(3000, 'J');
  s.back() = last;
  return s;
}

TEST(Engine, DifferentImagesWithIdenticalTextNeverShareTheSameImageDoes) {
  EngineCase ec = make_engine_case(Device::cpu(), 7);
  const ModelConfig& c = ec.model->config();
  const int64_t S = c.vision.image_size;
  const Tensor pa = testing::random_normal({3, S, S}, 71), pb = testing::random_normal({3, S, S}, 72);
  // The image first, so every prompt block but the text's holds image rows.
  std::vector<int32_t> prompt(static_cast<size_t>(c.image_tokens()), kImageToken);
  for (int32_t t : {3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14}) prompt.push_back(t);
  auto request = [&](const Tensor& pixels, char last) {
    Request r;
    r.id = "img-";
    r.id.push_back(last);
    r.prompt = prompt;
    r.images.push_back({pixels, image_key(encoded(last), "tiny")});
    r.sampling.max_tokens = 8;
    return r;
  };
  auto oracle = [&](const Tensor& pixels) {
    GenerateOptions go;
    go.max_new_tokens = 8;
    return generate_greedy(*ec.model, pixels.view({1, 3, S, S}), {{prompt, {0}}}, kImageToken, go)[0];
  };
  const std::vector<int32_t> want_a = oracle(pa), want_b = oracle(pb);
  ASSERT_NE(want_a, want_b) << "the two images must lead to different outputs for the test to mean anything";
  Engine engine(*ec.model, base_options());
  const RequestOutput a = engine.generate({request(pa, 'a')})[0];
  const RequestOutput b = engine.generate({request(pb, 'b')})[0];
  const RequestOutput a2 = engine.generate({request(pa, 'a')})[0];
  // The same image after other text: no prefix to share, but its embeddings come from the image cache.
  Request a3 = request(pa, 'a');
  a3.prompt.insert(a3.prompt.begin(), 20);
  ASSERT_TRUE(engine.generate({a3})[0].status.ok());
  EXPECT_EQ(a.completions[0].tokens, want_a);
  EXPECT_EQ(b.completions[0].tokens, want_b);
  EXPECT_EQ(a2.completions[0].tokens, want_a);
  EXPECT_EQ(b.cached_prompt_tokens, 0);             // nothing of a's prefix is b's
  EXPECT_EQ(a2.cached_prompt_tokens, 12);           // a's three full blocks of four (15 tokens)
  EXPECT_EQ(engine.stats().image_cache_misses, 2);  // a and b were encoded; a2 computed no image row
  EXPECT_EQ(engine.stats().image_cache_hits, 1);    // a3 found a's embeddings
  expect_all_blocks_free(engine);
}

TEST(Engine, BeamSearchEqualsFullRecomputeBeamSearchAndSharesBlocks) {
  EngineCase ec = make_engine_case(Device::cpu(), 8);
  for (int width : {2, 4}) {
    for (int64_t kv_blocks : {int64_t{4096}, int64_t{14}}) {  // roomy, and tight enough to preempt beams
      EngineOptions o = base_options();
      o.kv_memory = kv_blocks * 512;
      o.max_tokens_per_step = 9;
      Engine engine(*ec.model, o);
      std::vector<Request> reqs;
      for (size_t i : {size_t{0}, size_t{2}, size_t{7}}) {  // the text-only prompts
        Request r = ec.requests[i];
        r.sampling.beam_width = width;
        r.sampling.n = width;
        r.sampling.max_tokens = 7;
        r.sampling.length_penalty = 0.7f;
        reqs.push_back(r);
      }
      const std::vector<RequestOutput> out = engine.generate(reqs);
      for (size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_TRUE(out[i].status.ok()) << out[i].status.message();
        const std::vector<Hypothesis> want = reference_beam_search(*ec.model, reqs[i].prompt, width, 7, 0.7f);
        ASSERT_EQ(out[i].completions.size(), want.size()) << "width " << width << " request " << i;
        for (size_t k = 0; k < want.size(); ++k) {
          EXPECT_EQ(out[i].completions[k].tokens, want[k].tokens)
              << "width " << width << " request " << i << " beam " << k;
          EXPECT_NEAR(out[i].completions[k].score, want[k].score, 1e-4);
        }
      }
      if (kv_blocks == 14) {
        EXPECT_GT(engine.stats().preemptions, 0) << "width " << width;
      }
      expect_all_blocks_free(engine);
    }
  }
}

TEST(Engine, StopIdsAndStopStringsEndGeneration) {
  EngineCase ec = make_engine_case(Device::cpu(), 6);
  EngineOptions o = base_options();
  o.detokenize = [](const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += static_cast<char>('a' + id % 26);
    return s;
  };
  Engine engine(*ec.model, o);
  const std::vector<int32_t>& full = ec.expected[7];
  Request by_id = ec.requests[7];
  by_id.sampling.stop_ids = {full[3]};
  Request by_string = ec.requests[7];
  const std::string text = o.detokenize(full);
  const std::string stop(text.begin() + 2, text.begin() + 4);
  by_string.sampling.stop = {stop};
  const std::vector<RequestOutput> out = engine.generate({by_id, by_string});
  const auto first = std::find(full.begin(), full.end(), full[3]) - full.begin();
  EXPECT_EQ(out[0].completions[0].tokens, std::vector<int32_t>(full.begin(), full.begin() + first + 1));
  EXPECT_EQ(out[0].completions[0].finish_reason, "stop");
  // The text leaves the stop id out.
  EXPECT_EQ(out[0].completions[0].text, o.detokenize(std::vector<int32_t>(full.begin(), full.begin() + first)));
  const size_t at = text.find(stop);
  EXPECT_EQ(out[1].completions[0].text, std::string(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at)));
  EXPECT_EQ(out[1].completions[0].finish_reason, "stop");
  EXPECT_EQ(out[1].completions[0].tokens.size(), at + 2);
}

}  // namespace
}  // namespace vlm::infer

namespace vlm::infer {
namespace {

// A request cancelled while running (forked, n = 2) or still waiting gives back its KV blocks at once, gets no
// answer, and leaves the others' greedy outputs exactly as they would be alone; on_token reports every generated
// token of the survivors in order.
TEST(Engine, CancelFreesBlocksAndLeavesTheOthersUnchanged) {
  EngineCase ec = make_engine_case(Device::cpu(), 6);
  std::map<int64_t, std::vector<int32_t>> streamed;
  EngineOptions o = base_options();
  o.max_num_seqs = 3;
  o.on_token = [&](const TokenEvent& e) {
    if (e.completion == 0) streamed[e.request].push_back(e.token);
  };
  Engine engine(*ec.model, o);
  Request doomed = ec.requests[1];
  doomed.sampling.n = 2;
  doomed.sampling.temperature = 1.f;
  doomed.sampling.max_tokens = 64;
  const int64_t keep = engine.add_request(ec.requests[0]);
  const int64_t running = engine.add_request(doomed);
  std::vector<int64_t> waiting;
  for (int i = 0; i < 4; ++i) waiting.push_back(engine.add_request(ec.requests[2]));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(engine.step().empty());
  EXPECT_GT(engine.stats().blocks.used, 0);
  const int64_t used_before = engine.stats().blocks.used;
  EXPECT_TRUE(engine.cancel(running));
  EXPECT_TRUE(engine.cancel(waiting.back()));
  EXPECT_FALSE(engine.cancel(running));  // already gone
  EXPECT_FALSE(engine.cancel(12345));
  EXPECT_LT(engine.stats().blocks.used, used_before);
  std::map<int64_t, RequestOutput> answers;
  while (engine.has_unfinished())
    for (RequestOutput& r : engine.step()) answers[r.request] = std::move(r);
  EXPECT_EQ(answers.count(running), 0u);
  EXPECT_EQ(answers.count(waiting.back()), 0u);
  ASSERT_EQ(answers.count(keep), 1u);
  ASSERT_TRUE(answers[keep].status.ok());
  EXPECT_EQ(answers[keep].completions[0].tokens, ec.expected[0]);
  EXPECT_EQ(streamed[keep], ec.expected[0]);
  for (size_t i = 0; i + 1 < waiting.size(); ++i) {
    ASSERT_EQ(answers.count(waiting[i]), 1u);
    EXPECT_EQ(answers[waiting[i]].completions[0].tokens, ec.expected[2]);
  }
  expect_all_blocks_free(engine);
}

}  // namespace
}  // namespace vlm::infer
