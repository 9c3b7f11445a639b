// The engine thread and its hand-off on the tiny random model of tests/infer: requests submitted from many threads
// at once get exactly the greedy answers they get alone; streamed tokens equal the answer's; a full queue refuses;
// a cancelled request (mid-stream, or everything at shutdown) is answered with the given error and its KV blocks
// go back to the pool.
#include <gtest/gtest.h>

#include <thread>

#include "engine_fixture.h"
#include "serve/engine_loop.h"

namespace vlm::serve {
namespace {

using testing::kImageToken;
using testing::make_engine_case;

infer::EngineOptions options() {
  infer::EngineOptions o;
  o.block_size = 4;
  o.kv_memory = 1 << 20;
  o.image_token_id = kImageToken;
  return o;
}

Clock::time_point in(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Waits for the answer, gathering streamed tokens; fails the test after 60 s.
std::vector<StreamToken> drain(RequestChannel& ch) {
  std::vector<StreamToken> tokens;
  const auto until = in(60);
  while (!ch.wait(until, &tokens)) {
    if (Clock::now() >= until) {
      ADD_FAILURE() << "no answer in 60 s";
      break;
    }
  }
  return tokens;
}

// The loop's gauges after its next steps: waits until no block is held (the snapshot follows each step).
void expect_blocks_return(const EngineLoop& loop) {
  const auto until = in(10);
  while (loop.snapshot().engine.blocks.used != 0 && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(loop.snapshot().engine.blocks.used, 0);
}

TEST(EngineLoop, ConcurrentSubmittersGetTheirOwnGreedyAnswers) {
  auto ec = make_engine_case(Device::cpu(), 11);
  ServeMetrics metrics;
  EngineLoop loop(*ec.model, options(), 64, metrics);
  std::vector<std::thread> threads;
  std::vector<std::vector<int32_t>> got(ec.requests.size() * 3);
  std::vector<std::vector<int32_t>> streamed(got.size());
  for (size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&, t] {
      const size_t i = t % ec.requests.size();
      auto ch = loop.submit(ec.requests[i], /*stream=*/t % 2 == 0);
      ASSERT_NE(ch, nullptr);
      for (const StreamToken& tok : drain(*ch)) streamed[t].push_back(tok.token);
      ASSERT_TRUE(ch->error().ok()) << ch->error().message;
      ASSERT_TRUE(ch->answer().status.ok());
      got[t] = ch->answer().completions[0].tokens;
    });
  for (auto& t : threads) t.join();
  for (size_t t = 0; t < got.size(); ++t) {
    EXPECT_EQ(got[t], ec.expected[t % ec.requests.size()]) << "submitter " << t;
    if (t % 2 == 0)
      EXPECT_EQ(streamed[t], got[t]) << "submitter " << t;
    else
      EXPECT_TRUE(streamed[t].empty());
  }
  EXPECT_EQ(loop.in_flight(), 0);
  expect_blocks_return(loop);
}

TEST(EngineLoop, FullQueueRefusesAndCancelFreesBlocks) {
  auto ec = make_engine_case(Device::cpu(), 12, 40);
  ServeMetrics metrics;
  EngineLoop loop(*ec.model, options(), 2, metrics);
  auto a = loop.submit(ec.requests[0], true);
  auto b = loop.submit(ec.requests[1], false);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(loop.submit(ec.requests[2], false), nullptr);  // 40 tokens each: neither is done yet
  // Cancel `a` once it streams: on a loaded machine the engine may finish its 40 tokens first, so a few tries
  // with fresh long requests (the queue has one free slot each time) until one is caught running.
  bool caught = false;
  for (int attempt = 0; attempt < 5 && !caught; ++attempt) {
    if (attempt > 0) a = loop.submit(ec.requests[0], true);
    ASSERT_NE(a, nullptr);
    std::vector<StreamToken> tokens;
    while (tokens.empty() && !a->wait(in(10), &tokens)) {
    }
    loop.cancel(a, ApiError{499, "gone", "invalid_request_error", "", ""});
    drain(*a);
    caught = a->error().status == 499;
    if (!caught) {
      EXPECT_TRUE(a->error().ok());  // it finished first
    }
  }
  EXPECT_TRUE(caught) << "five requests finished before their cancellation";
  drain(*b);
  EXPECT_TRUE(b->error().ok());
  EXPECT_EQ(b->answer().completions[0].tokens, ec.expected[1]);
  EXPECT_EQ(loop.in_flight(), 0);
  expect_blocks_return(loop);
  EXPECT_NE(loop.submit(ec.requests[2], false), nullptr);  // room again

  // Shutdown: everything queued or running is answered with the error.
  std::vector<std::shared_ptr<RequestChannel>> pending;
  EngineLoop busy(*ec.model, options(), 8, metrics);
  for (int i = 0; i < 4; ++i) pending.push_back(busy.submit(ec.requests[static_cast<size_t>(i)], i % 2 == 0));
  busy.cancel_all(unavailable("shutting down"));
  for (auto& ch : pending) {
    drain(*ch);
    EXPECT_TRUE(ch->error().status == 503 || ch->error().ok());  // one may have finished first
  }
  EXPECT_EQ(busy.in_flight(), 0);
  expect_blocks_return(busy);
}

}  // namespace
}  // namespace vlm::serve
