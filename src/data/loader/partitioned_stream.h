// A rank's samples, epoch after epoch, in "slots": slot i of an epoch is the i-th sample of this rank's range of the
// DataPlan, after an optional shuffle within windows of `shuffle_window` slots. Every rank sees exactly
// plan.samples_per_rank() slots per epoch; a slot whose sample is malformed or whose shard broke comes back marked
// bad (counted, with the reason) instead of being replaced, so ranks never drift apart and a fixed number of batches
// per epoch never hangs a collective.
//
// Determinism and resume: the slot order depends only on (plan, seed, epoch). SlotPosition after any slot restarts a
// new stream right there: it re-reads the current shuffle window from its first slot (skipping by headers) and
// continues from the same offset.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "data/io/webdataset.h"
#include "data/loader/data_plan.h"

namespace vlm {

struct SlotPosition {
  uint64_t epoch = 0;
  uint64_t index = 0;  // next slot of the epoch
  bool operator==(const SlotPosition& o) const = default;
  nlohmann::json to_json() const;
  static Expected<SlotPosition> from_json(const nlohmann::json& j);
};

struct Slot {
  bool ok = false;
  std::string error;  // why the slot is empty (when !ok): names shard and key or offset
  WebDatasetSample sample;
  uint64_t epoch = 0, index = 0;
  uint64_t global_index = 0;  // epoch * total + rank's first sample + index: a stable id for per-sample randomness
};

struct PartitionedStreamCounters {
  uint64_t slots = 0, slots_bad = 0, shards_opened = 0, shards_failed = 0;
  uint64_t unsafe_members = 0;  // tar members skipped for an absolute or '..' name, in the samples read
};

class PartitionedSampleStream {
 public:
  struct Options {
    uint64_t epochs = 1;          // 0 = forever
    uint64_t shuffle_window = 0;  // 0 or 1 = read order
    SlotPosition start;
    TarReaderOptions tar;
  };
  static Expected<std::unique_ptr<PartitionedSampleStream>> create(DataPlan plan, Options options);

  // The next slot; false when every epoch is done.
  Expected<bool> next(Slot& slot);
  uint64_t slots_per_epoch() const { return plan_.samples_per_rank(); }
  uint64_t slots_left_in_epoch() const { return slots_per_epoch() - pos_.index; }
  // Jumps to the first slot of the next epoch (drop-last of a partial batch).
  void finish_epoch();
  SlotPosition position() const { return pos_; }
  PartitionedStreamCounters counters() const;
  const DataPlan& plan() const { return plan_; }

 private:
  PartitionedSampleStream(DataPlan plan, Options options);
  Status load_window();            // reads the window holding pos_.index
  Status read_slot(Slot& slot);    // the next slot in reading order (cursor_)
  void seek_reading_order(uint64_t index);

  DataPlan plan_;
  Options options_;
  SlotPosition pos_;
  // The current window: slots [window_start_, window_start_ + window_.size()) in reading order, and the permutation.
  uint64_t window_epoch_ = UINT64_MAX, window_start_ = 0;
  std::vector<Slot> window_;
  std::vector<uint32_t> perm_;
  // Reading cursor over this epoch's segments.
  std::vector<ShardSegment> segments_;
  size_t seg_ = 0;
  uint64_t seg_offset_ = 0;
  std::unique_ptr<WebDatasetReader> reader_;
  bool reader_dead_ = false;
  std::string reader_error_;
  std::atomic<uint64_t> n_slots_{0}, n_bad_{0}, n_opened_{0}, n_failed_{0}, n_unsafe_{0};
  uint64_t reader_unsafe_seen_ = 0;  // reader_'s unsafe names already in n_unsafe_ (or skipped over by a resume)
};

}  // namespace vlm
