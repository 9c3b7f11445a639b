// The continuous-batching scheduler. Each step it gives every running sequence its next rows (one token when
// decoding, the next chunk of a prompt otherwise) and then admits waiting sequences first come first served, all
// under a per-step token budget and a cap on running sequences, so prefill chunks ride along with decodes. When the
// pool runs out of blocks the most recently admitted running sequence is preempted: its blocks are released and it
// waits again with its tokens kept, to be recomputed (through the prefix cache where its blocks survive) and to go
// on exactly where it stopped. Prefix caching: full blocks are registered under their hash chain once computed,
// and an admitted sequence starts from the longest run of its leading full blocks found in the pool.
// Not thread-safe; the engine owns the sequences, the scheduler only points at them.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "infer/block_pool.h"
#include "infer/sequence.h"

namespace vlm::infer {

struct SchedulerOptions {
  int block_size = 16;
  int max_num_seqs = 256;          // running sequences at most
  int max_tokens_per_step = 2048;  // rows of one forward (decodes + prefill chunks)
  bool prefix_cache = true;
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t start = 0;  // first row's position (= seq->computed when scheduled)
  int64_t count = 0;  // rows
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;
  std::vector<std::pair<int32_t, int32_t>> copies;  // (src, dst) blocks to copy before the forward (copy-on-write)
  std::vector<Sequence*> preempted;                 // sequences sent back to waiting in this step
  bool empty() const { return chunks.empty(); }
};

struct SchedulerStats {
  int64_t preemptions = 0;
  int64_t prefix_hit_tokens = 0;  // tokens admitted from the prefix cache
  int64_t waste_slots = 0;        // slots of held blocks that hold no computed token (counted once per block)
  int64_t held_blocks = 0;        // blocks held (by running sequences)
};

class Scheduler {
 public:
  Scheduler(BlockPool& pool, const SchedulerOptions& options);

  void add(Sequence* seq);  // joins the waiting queue in FCFS order
  // A fork of a running sequence (holding its parent's blocks, already retained) joins the running set.
  void add_running(Sequence* seq);
  StepPlan schedule();
  // After the plan's rows were computed: advances each chunk's sequence and registers its newly full blocks.
  void commit(const StepPlan& plan);
  bool is_running(const Sequence* seq) const;
  // Removes a running or waiting sequence and releases its blocks.
  void remove(Sequence* seq);

  const std::vector<Sequence*>& running() const { return running_; }
  // Running slots taken (Sequence::slots summed): admission keeps it within max_num_seqs.
  int64_t running_slots() const;
  const std::deque<Sequence*>& waiting() const { return waiting_; }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return options_; }
  // Aborts on a broken invariant: block tables cover the computed tokens, reference counts equal the number of
  // holders, running within limits, waiting sequences hold nothing.
  void check_invariants() const;

 private:
  // Blocks (and copy-on-write of a shared last block) for `count` more rows of `seq`; false (nothing changed)
  // when the pool lacks them.
  bool reserve(Sequence& seq, int64_t count, StepPlan& plan);
  void release_blocks(Sequence& seq);
  void preempt(Sequence* seq, StepPlan& plan);
  void match_prefix(Sequence& seq);
  BlockHash hash_of_block(const Sequence& seq, int64_t index) const;

  BlockPool& pool_;
  SchedulerOptions options_;
  std::vector<Sequence*> running_;  // admission order
  std::deque<Sequence*> waiting_;   // by order
  int64_t preemptions_ = 0, prefix_hit_tokens_ = 0;
};

}  // namespace vlm::infer
