// Per-op device time, for finding where a training step goes (the GPU machine has no Nsight Systems). While a
// profile is recording, every ops:: call that runs on a CUDA device is bracketed by two CUDA events on its stream,
// and every CPU call by the host clock; profile_end() synchronizes and sums the time per key. A key is
// "<scope>/<op> <tag>": the innermost ProfileScope labels of the calling thread, the op's name, and a shape tag for
// the ops where the shape tells the call sites apart (GEMMs "MxNxK", attention "tokens h<q>/<kv> d<D>").
// Costs nothing measurable when not recording (one relaxed atomic load per op). Recording is per process; calls
// from several host threads are recorded, but a profile is meant for one thread driving one device.
// An op that calls other ops is counted once, as the outermost op.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/status.h"

namespace vlm::ops::profile {

struct OpTime {
  std::string key;     // "<scope>/<op> <tag>"
  std::string op;      // the op name alone
  int64_t calls = 0;
  double ms = 0;       // summed device (CUDA) or host (CPU) time
};

namespace detail {
extern std::atomic<bool> g_recording;
void set_tag(std::string tag);
}  // namespace detail

inline bool recording() { return detail::g_recording.load(std::memory_order_relaxed); }

// Starts recording (clearing what was recorded before).
void profile_begin();
// Stops recording, synchronizes the devices that were used, and returns the summed times, largest first.
std::vector<OpTime> profile_end();

// Labels the op calls made in its lifetime (nested scopes join with '/').
class ProfileScope {
 public:
  explicit ProfileScope(const char* label);
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  bool active_ = false;
};

// Brackets one op call (used by the dispatch macro of ops/check.h); does nothing unless recording.
class OpRange {
 public:
  OpRange(const char* op, Device device);
  ~OpRange();
  OpRange(const OpRange&) = delete;
  OpRange& operator=(const OpRange&) = delete;

 private:
  int64_t slot_ = -1;
};

}  // namespace vlm::ops::profile

// Sets the shape tag of the next op call on this thread (evaluated only while recording).
#define VLM_PROFILE_TAG(...)                                                          \
  do {                                                                                \
    if (::vlm::ops::profile::recording()) ::vlm::ops::profile::detail::set_tag(::vlm::str(__VA_ARGS__)); \
  } while (0)
