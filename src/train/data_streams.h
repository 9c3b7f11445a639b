// The training data as a fixed number of streams, independent of how many ranks read them, so that a run resumed on
// another world size continues the same sample sequence. Stream s of S is the data plan's share s of S
// (VlmDataOptions rank = s, world = S); rank r of a launch of W hosts streams r, r + W, r + 2W, ... Each optimizer
// step takes train.grad_accum micro-batches of train.batch_size samples from every stream, so the step's samples
// (and so its gradient, up to the order of the sums) depend only on S, never on W. S is train.data_streams (0: the
// world size of the run's first launch) and is kept by checkpoints with every stream's loader state.
// Ranks hosting fewer streams than others get empty micro-batches (no samples), so every rank runs the same number
// of micro-batches a step: W should divide S for balanced ranks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/loader/vlm_batch.h"
#include "data/tokenizer/tokenizer.h"

namespace vlm {

// The micro-batches of one optimizer step on this rank (empty ones included), with the hosted streams' loader
// states and counters right after the last of them: what a checkpoint of this step records.
struct StreamStepBatches {
  std::vector<PackedBatch> micro;
  int64_t target_tokens = 0;        // loss rows over all micro-batches
  std::vector<std::string> states;  // each hosted stream's, in hosted order
  LoaderCounters counters;          // summed over the hosted streams
  Status error;  // a loader error, returned when the step that needs these batches starts (as without read-ahead)
};

class DataStreams {
 public:
  // `streams` streams hosted round-robin over a launch of `world` ranks; options' rank and world are replaced.
  static Expected<DataStreams> open(VlmDataOptions options, const Tokenizer& tokenizer, int streams, int rank,
                                    int world);
  int streams() const { return streams_; }
  const std::vector<int>& hosted() const { return hosted_; }
  // grad_accum rounds of one batch from each hosted stream, padded with empty batches to the micro-batch count of
  // the ranks hosting the most streams.
  StreamStepBatches read_step(int batch_size, int grad_accum);
  LoaderCounters counters() const;
  // Every stream's state, in stream order, from each rank's hosted states (in rank order).
  std::vector<std::string> assemble(const std::vector<std::string>& rank_states_json) const;
  // The hosted states as one JSON array (what a rank contributes to assemble()).
  static std::string join(const std::vector<std::string>& hosted_states);
  // Restores the hosted streams from every stream's state.
  Status restore(const std::vector<std::string>& all_states);

 private:
  int streams_ = 1, rank_ = 0, world_ = 1, max_hosted_ = 1;
  std::vector<int> hosted_;
  std::vector<std::unique_ptr<VlmBatchLoader>> loaders_;
};

// a += b, every counter.
void add_loader_counters(LoaderCounters& a, const LoaderCounters& b);

}  // namespace vlm
