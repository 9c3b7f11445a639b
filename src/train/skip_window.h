// The trainer's guard against a run that only looks healthy: over a sliding window of the last N samples the loader
// was assigned, the fraction it had to skip as bad (undecodable image, malformed text or tar group, too long,
// invalid UTF-8). Past the limit the run stops with an error naming the main reason, instead of "training" on
// steps without targets. Filtered and duplicate samples are data cleaning, not failures: they do not count.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "core/status.h"
#include "data/loader/vlm_batch.h"

namespace vlm {

class SkipWindow {
 public:
  // `max_fraction` in [0, 1] (1: never stops); `window` samples (> 0); `start`: the loader's counters before the
  // first batch this process reads (resumed runs start from the checkpoint's).
  SkipWindow(double max_fraction, int64_t window, const LoaderCounters& start);

  // The loader's counters after another step's batches. An error once the last `window` samples are all seen and
  // more than max_fraction of them were skipped.
  Status add(const LoaderCounters& now);
  // The same check over the samples seen since the start when fewer than `window` were (the end of a short run or
  // of the data). OK when nothing was seen.
  Status check_partial() const;

  // Steps without a single target token (not optimizer steps), for the message.
  void count_empty_step() { ++empty_steps_; }
  int64_t empty_steps() const { return empty_steps_; }

 private:
  static constexpr int kReasons = 5;  // bad_images, bad_text, bad_members, too_long, bad_utf8
  struct Entry {
    uint64_t slots = 0;
    uint64_t reasons[kReasons] = {};
  };
  Status check(const Entry& total, bool full) const;

  double max_fraction_;
  uint64_t window_;
  LoaderCounters last_;
  std::deque<Entry> entries_;
  Entry total_;
  int64_t empty_steps_ = 0;
};

}  // namespace vlm
