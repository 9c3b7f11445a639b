// Collectives issued ahead of the compute that reads their results, and joined back into it where it does, on any
// backend. A client (FSDP) issues a collective with `after` = compute() (on a GPU it then starts once the compute
// stream's work so far is done and runs on the communicator's stream beside the compute that follows), files its
// Works here under a (tag, key) — "gather" of unit 3 — and joins them right before the compute that needs them:
// the compute stream waits for them (a CUDA event, the host does not block; CPU backends wait()), then the entry's
// `then` runs (work queued on the compute stream after the wait: a dequantization, an accumulation into the
// gradient shard). The Works keep the buffers they read and write alive until joined, so a buffer the compute stream
// allocated may be reused by it as soon as it lets go (the caching allocator reuses a block on its own stream only).
// The same code runs on the CPU (MPI, a world of one) and the GPU (NCCL), so the CPU tests see the order the GPU
// gets. An optional trace records every issue, join and client note in order (tests check the schedule with it).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace vlm::dist {

struct ScheduleEvent {
  enum class Type : uint8_t { issued, joined, note };
  Type type = Type::note;
  std::string tag;  // "gather", "reduce", or the client's note ("use", "free", ...)
  int key = 0;
  bool operator==(const ScheduleEvent& o) const { return type == o.type && tag == o.tag && key == o.key; }
};
std::string describe(const ScheduleEvent& e);  // "issued gather 3"

class CollectiveSchedule {
 public:
  // `compute`: the stream that reads the results (nullptr: the CPU, or the legacy default stream of a GPU).
  explicit CollectiveSchedule(StreamHandle compute = nullptr) : compute_(compute) {}
  ~CollectiveSchedule();
  CollectiveSchedule(const CollectiveSchedule&) = delete;
  CollectiveSchedule& operator=(const CollectiveSchedule&) = delete;

  StreamHandle compute() const { return compute_; }
  void set_compute(StreamHandle compute) { compute_ = compute; }

  // Files the issued `works` of (tag, key) (at most one entry per tag and key at a time); `then` runs when joined.
  void add(const std::string& tag, int key, std::vector<WorkHandle> works, std::function<void()> then = {});
  bool pending(const std::string& tag, int key) const;
  // The compute stream waits for (tag, key)'s collectives, then its `then` runs. Not pending: nothing happens.
  // Returns the first collective error.
  Status join(const std::string& tag, int key);
  // Every pending entry of `tag` (every entry: "") but the newest `keep` ones, in issue order.
  Status join_all(const std::string& tag = "", size_t keep = 0);
  size_t count(const std::string& tag = "") const;

  // The trace: off until trace(true); note() adds a client event (a use, a free) between the schedule's own.
  void trace(bool on) { tracing_ = on; }
  void note(const std::string& tag, int key);
  const std::vector<ScheduleEvent>& events() const { return events_; }
  void clear_events() { events_.clear(); }

 private:
  struct Entry {
    std::string tag;
    int key = 0;
    std::vector<WorkHandle> works;
    std::function<void()> then;
  };
  Status finish(Entry& e);
  void record(ScheduleEvent::Type type, const std::string& tag, int key);

  StreamHandle compute_;
  std::vector<Entry> entries_;  // in issue order
  bool tracing_ = false;
  std::vector<ScheduleEvent> events_;
};

}  // namespace vlm::dist
