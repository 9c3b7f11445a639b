// The scheduler without a model: a simulated KV cache stores in each slot the key of the prefix ending at that
// position, so every step can check that what attention would read is exactly its sequence's prefix, through
// chunked prefill, prefix-cache hits, copy-on-write after forks and preemption. A seeded randomized stress test
// checks the invariants after every step and that every block is free at the end.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>

#include "infer/scheduler.h"

namespace vlm::infer {
namespace {

// The key of tokens[0..p] (a rolling hash): what the K/V at position p depends on.
uint64_t prefix_key(const std::vector<int32_t>& t, int64_t p) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t i = 0; i <= p; ++i) h = (h ^ static_cast<uint64_t>(t[static_cast<size_t>(i)] + 7)) * 1099511628211ull;
  return h;
}

struct Sim {
  SchedulerOptions opts;
  BlockPool pool;
  Scheduler sched;
  std::vector<uint64_t> slots;  // the simulated cache
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<int64_t> target_len;  // per sequence: output tokens to generate
  Philox rng{1234, 0};
  int64_t next_order = 0;
  int64_t finished = 0, forks = 0, copies = 0;

  Sim(int64_t blocks, const SchedulerOptions& o)
      : opts(o), pool(blocks), sched(pool, o), slots(static_cast<size_t>(blocks * o.block_size), 0) {}

  Sequence* add(std::vector<int32_t> prompt, int64_t out_len) {
    auto s = std::make_unique<Sequence>();
    s->order = next_order++ * 1024;
    s->request = static_cast<int64_t>(seqs.size());
    s->tokens = std::move(prompt);
    s->prompt_len = static_cast<int64_t>(s->tokens.size());
    sched.add(s.get());
    seqs.push_back(std::move(s));
    target_len.push_back(out_len);
    return seqs.back().get();
  }

  // One engine step without the model; returns false when idle.
  bool step(double fork_prob) {
    StepPlan plan = sched.schedule();
    if (plan.empty()) {
      EXPECT_TRUE(sched.idle()) << "nothing scheduled with work waiting";
      return false;
    }
    if (!execute(plan)) return false;
    for (const ScheduledChunk& c : plan.chunks) {
      Sequence* s = c.seq;
      if (s->computed != static_cast<int64_t>(s->tokens.size())) continue;
      // Sampled: maybe fork first (a child shares every block), then append a token to each.
      if (sched.running_slots() < opts.max_num_seqs && rng.uniform() < fork_prob) {
        auto child = std::make_unique<Sequence>(*s);
        child->order = s->order + 1 + static_cast<int64_t>(rng.uniform_int(500));
        child->request = static_cast<int64_t>(seqs.size());
        for (int32_t b : child->blocks) pool.retain(b);
        sched.add_running(child.get());
        target_len.push_back(target_len[static_cast<size_t>(s->request)]);
        seqs.push_back(std::move(child));
        ++forks;
        append(seqs.back().get());
      }
      append(s);
    }
    sched.check_invariants();
    return true;
  }

  // The model's part of a step: copies, then reads (checked) and writes of the simulated cache; then commit.
  bool execute(const StepPlan& plan) {
    int64_t rows = 0;
    copies += static_cast<int64_t>(plan.copies.size());
    for (const auto& [src, dst] : plan.copies) {
      EXPECT_EQ(pool.ref_count(dst), 1);
      for (int i = 0; i < opts.block_size; ++i)
        slots[static_cast<size_t>(dst * opts.block_size + i)] = slots[static_cast<size_t>(src * opts.block_size + i)];
    }
    for (const ScheduledChunk& c : plan.chunks) {
      Sequence& s = *c.seq;
      EXPECT_GT(c.count, 0);
      rows += c.count;
      EXPECT_GE(static_cast<int64_t>(s.blocks.size()) * opts.block_size, c.start + c.count);
      // What attention reads: the cached context before this chunk.
      for (int64_t p = 0; p < c.start; ++p) {
        const int32_t b = s.blocks[static_cast<size_t>(p / opts.block_size)];
        if (slots[static_cast<size_t>(b * opts.block_size + p % opts.block_size)] != prefix_key(s.tokens, p)) {
          ADD_FAILURE() << "sequence " << s.request << " reads a wrong K/V at position " << p;
          return false;
        }
      }
      // A written block is held by this sequence alone (copy-on-write makes it so).
      for (int64_t p = c.start; p < c.start + c.count; ++p) {
        const int32_t b = s.blocks[static_cast<size_t>(p / opts.block_size)];
        EXPECT_EQ(pool.ref_count(b), 1) << "write into a shared block";
        slots[static_cast<size_t>(b * opts.block_size + p % opts.block_size)] = prefix_key(s.tokens, p);
      }
    }
    EXPECT_LE(rows, opts.max_tokens_per_step);
    EXPECT_LE(static_cast<int>(sched.running().size()), opts.max_num_seqs);
    sched.commit(plan);
    return true;
  }

  void append(Sequence* s) {
    s->tokens.push_back(static_cast<int32_t>(rng.uniform_int(3)));  // few ids: forks often repeat blocks
    if (s->output_len() >= target_len[static_cast<size_t>(s->request)]) {
      sched.remove(s);
      ++finished;
    }
  }
};

TEST(Scheduler, ChunkedPrefillRespectsTheBudgetAndDecodesRideAlong) {
  SchedulerOptions o;
  o.block_size = 4;
  o.max_tokens_per_step = 10;
  Sim sim(64, o);
  sim.add(std::vector<int32_t>(3, 1), 5);   // short: decoding after one step
  sim.add(std::vector<int32_t>(25, 2), 2);  // long: prefilled in chunks beside the decodes
  StepPlan first = sim.sched.schedule();
  ASSERT_EQ(first.chunks.size(), 2u);
  EXPECT_EQ(first.chunks[0].count, 3);
  EXPECT_EQ(first.chunks[1].count, 7);
  ASSERT_TRUE(sim.execute(first));
  sim.append(first.chunks[0].seq);
  StepPlan second = sim.sched.schedule();
  ASSERT_EQ(second.chunks.size(), 2u);
  EXPECT_EQ(second.chunks[0].count, 1);  // the decode
  EXPECT_EQ(second.chunks[1].count, 9);  // the rest of the budget
  ASSERT_TRUE(sim.execute(second));
  sim.append(second.chunks[0].seq);
  while (sim.step(0.0)) {
  }
  EXPECT_EQ(sim.finished, 2);
  EXPECT_EQ(sim.pool.num_free(), sim.pool.num_blocks());
}

TEST(Scheduler, AdmitsFirstComeFirstServedWithinTheSequenceCap) {
  SchedulerOptions o;
  o.block_size = 4;
  o.max_num_seqs = 2;
  Sim sim(64, o);
  Sequence* a = sim.add({1, 2}, 3);
  Sequence* b = sim.add({1, 3}, 3);
  Sequence* c = sim.add({1, 4}, 3);
  StepPlan p = sim.sched.schedule();
  ASSERT_EQ(p.chunks.size(), 2u);
  EXPECT_EQ(p.chunks[0].seq, a);
  EXPECT_EQ(p.chunks[1].seq, b);
  EXPECT_EQ(sim.sched.waiting().front(), c);
  ASSERT_TRUE(sim.execute(p));
  for (auto& ch : p.chunks) sim.append(ch.seq);
  while (sim.step(0.0)) {
  }
  EXPECT_EQ(sim.finished, 3);
}

TEST(Scheduler, PrefixCacheSharesFullBlocksAndLeavesTheLastTokenToCompute) {
  SchedulerOptions o;
  o.block_size = 4;
  Sim sim(64, o);
  std::vector<int32_t> prompt(12);
  std::iota(prompt.begin(), prompt.end(), 10);
  sim.add(prompt, 1);
  while (sim.step(0.0)) {
  }
  // The same 12 tokens again: two full blocks come from the cache (the third would leave nothing to compute).
  Sequence* again = sim.add(prompt, 1);
  StepPlan p = sim.sched.schedule();
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0].start, 8);
  EXPECT_EQ(p.chunks[0].count, 4);
  EXPECT_EQ(sim.sched.stats().prefix_hit_tokens, 8);
  ASSERT_TRUE(sim.execute(p));
  sim.append(again);
  // With the cache off nothing is shared.
  SchedulerOptions off = o;
  off.prefix_cache = false;
  Sim cold(64, off);
  cold.add(prompt, 1);
  while (cold.step(0.0)) {
  }
  cold.add(prompt, 1);
  EXPECT_EQ(cold.sched.schedule().chunks[0].start, 0);
}

TEST(Scheduler, PreemptsTheNewestWhenBlocksRunOutAndResumesIt) {
  SchedulerOptions o;
  o.block_size = 2;
  o.prefix_cache = false;
  Sim sim(6, o);  // 12 slots for two sequences that grow to 8 tokens each
  sim.add({1, 2, 3}, 5);
  sim.add({4, 5, 6}, 5);
  while (sim.step(0.0)) {
  }
  EXPECT_EQ(sim.finished, 2);
  EXPECT_GT(sim.sched.stats().preemptions, 0);
  EXPECT_EQ(sim.pool.num_free(), 6);
}

// Randomized: arrivals, prompts sharing prefixes, forks, a pool small enough to preempt often.
TEST(Scheduler, RandomizedStressKeepsInvariantsAndFreesEveryBlock) {
  int64_t preemptions = 0, forks = 0, copies = 0, hits = 0;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    SchedulerOptions o;
    o.block_size = 1 + static_cast<int>(seed % 4) * 3;  // 1, 4, 7, 10
    o.max_num_seqs = 3 + static_cast<int>(seed);
    o.max_tokens_per_step = 8 + static_cast<int>(seed) * 5;
    o.prefix_cache = seed % 2 == 0;
    const int64_t blocks = (seed % 3 == 0 ? 60 : 200) / o.block_size + 4;
    Sim sim(blocks, o);
    sim.rng = Philox(seed, 1);
    const int64_t max_tokens = blocks * o.block_size / 2;
    int added = 0;
    for (int step = 0; step < 4000 && (added < 40 || !sim.sched.idle()); ++step) {
      if (added < 40 && sim.rng.uniform() < 0.3) {
        const int64_t len = 1 + static_cast<int64_t>(sim.rng.uniform_int(static_cast<uint64_t>(max_tokens / 2)));
        std::vector<int32_t> prompt(static_cast<size_t>(len));
        const int32_t family = static_cast<int32_t>(sim.rng.uniform_int(3));  // shared leading tokens
        for (int64_t i = 0; i < len; ++i)
          prompt[static_cast<size_t>(i)] = i < len / 2 ? family : static_cast<int32_t>(sim.rng.uniform_int(5));
        sim.add(prompt, 1 + static_cast<int64_t>(sim.rng.uniform_int(static_cast<uint64_t>(max_tokens - len))));
        ++added;
      }
      if (!sim.step(0.05) && ::testing::Test::HasFailure()) return;
    }
    ASSERT_TRUE(sim.sched.idle()) << "seed " << seed;
    EXPECT_EQ(sim.finished, static_cast<int64_t>(sim.seqs.size())) << "seed " << seed;
    EXPECT_EQ(sim.pool.num_free(), sim.pool.num_blocks()) << "seed " << seed;
    sim.pool.check_invariants();
    preemptions += sim.sched.stats().preemptions;
    forks += sim.forks;
    copies += sim.copies;
    hits += sim.sched.stats().prefix_hit_tokens;
  }
  // The run exercised what it is meant to check.
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(forks, 0);
  EXPECT_GT(copies, 0);
  EXPECT_GT(hits, 0);
}

}  // namespace
}  // namespace vlm::infer
