// SkipWindow: see skip_window.h.
#include "train/skip_window.h"

#include <algorithm>

namespace vlm {
namespace {

constexpr const char* kReasonNames[] = {"bad_images", "bad_text", "bad_members", "too_long", "bad_utf8"};
constexpr const char* kReasonHelp[] = {
    "images that fail to decode or are too large",
    "missing or invalid .json / .txt",
    "malformed tar groups or broken shards",
    "a turn longer than model.text.max_seq_len",
    "captions that are not valid UTF-8 (data.invalid_utf8)",
};

void reasons_of(const LoaderCounters& c, uint64_t out[5]) {
  out[0] = c.bad_images;
  out[1] = c.bad_text;
  out[2] = c.bad_members;
  out[3] = c.too_long;
  out[4] = c.bad_utf8;
}

}  // namespace

SkipWindow::SkipWindow(double max_fraction, int64_t window, const LoaderCounters& start)
    : max_fraction_(max_fraction), window_(static_cast<uint64_t>(std::max<int64_t>(1, window))), last_(start) {}

Status SkipWindow::add(const LoaderCounters& now) {
  Entry e;
  e.slots = now.slots - last_.slots;
  uint64_t a[kReasons], b[kReasons];
  reasons_of(now, a);
  reasons_of(last_, b);
  for (int r = 0; r < kReasons; ++r) e.reasons[r] = a[r] - b[r];
  last_ = now;
  entries_.push_back(e);
  total_.slots += e.slots;
  for (int r = 0; r < kReasons; ++r) total_.reasons[r] += e.reasons[r];
  while (entries_.size() > 1 && total_.slots - entries_.front().slots >= window_) {
    total_.slots -= entries_.front().slots;
    for (int r = 0; r < kReasons; ++r) total_.reasons[r] -= entries_.front().reasons[r];
    entries_.pop_front();
  }
  if (total_.slots < window_) return Status();
  return check(total_, true);
}

Status SkipWindow::check_partial() const {
  if (total_.slots == 0 || total_.slots >= window_) return Status();
  return check(total_, false);
}

Status SkipWindow::check(const Entry& t, bool full) const {
  uint64_t skipped = 0;
  int main = 0;
  for (int r = 0; r < kReasons; ++r) {
    skipped += t.reasons[r];
    if (t.reasons[r] > t.reasons[main]) main = r;
  }
  const double fraction = static_cast<double>(skipped) / static_cast<double>(t.slots);
  if (max_fraction_ >= 1.0 || fraction <= max_fraction_) return Status();
  std::string others;
  for (int r = 0; r < kReasons; ++r)
    if (r != main && t.reasons[r] > 0) others += str(", ", kReasonNames[r], " ", t.reasons[r]);
  return invalid_argument(str("stopping: ", skipped, " of the ", full ? "last " : "", t.slots, " samples", full ? "" : " read",
                       " were skipped as bad (", static_cast<int>(fraction * 1000) / 10.0,
                       "%, more than data.max_skip_fraction ", max_fraction_, "); main reason: ", kReasonNames[main],
                       " (", t.reasons[main], ": ", kReasonHelp[main], ")", others,
                       empty_steps_ > 0 ? str("; ", empty_steps_, " step(s) had no target token and were not taken")
                                        : std::string(),
                       ". The warnings above name shard and key of each."));
}

}  // namespace vlm
