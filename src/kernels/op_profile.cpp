// Per-op time recording (see op_profile.h): CUDA events on the op's stream for CUDA calls, the host clock for CPU
// calls; events come from a pool reused across profiles.
#include "kernels/op_profile.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>

#ifdef VLM_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_context.h"
#endif

namespace vlm::ops::profile {

namespace detail {
std::atomic<bool> g_recording{false};
}  // namespace detail

namespace {

struct Record {
  int key = 0;
  Device device;
  void* start = nullptr;  // cudaEvent_t for CUDA records
  void* end = nullptr;
  double host_start = 0, host_ms = 0;
};

struct State {
  std::mutex mu;
  std::vector<Record> records;
  std::vector<std::string> keys, key_ops;
  std::map<std::string, int> key_ids;
  std::vector<void*> event_pool;
};
State& state() {
  static State s;
  return s;
}

thread_local std::vector<std::string> t_scopes;
thread_local std::string t_tag;
thread_local int t_depth = 0;

double host_now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#ifdef VLM_HAVE_CUDA
void* take_event(State& s) {  // caller holds s.mu
  if (!s.event_pool.empty()) {
    void* e = s.event_pool.back();
    s.event_pool.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  VLM_CHECK(cudaEventCreate(&e) == cudaSuccess, "op profile: cudaEventCreate failed");
  return e;
}
void record_event(void* event, Device device) {
  ops::cuda::DeviceGuard guard(device);
  VLM_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event),
                            static_cast<cudaStream_t>(ops::cuda::current_stream(device))) == cudaSuccess,
            "op profile: cudaEventRecord failed");
}
#endif

}  // namespace

void detail::set_tag(std::string tag) { t_tag = std::move(tag); }

void profile_begin() {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (Record& r : s.records) {
      if (r.start) s.event_pool.push_back(r.start);
      if (r.end) s.event_pool.push_back(r.end);
    }
    s.records.clear();
    s.keys.clear();
    s.key_ops.clear();
    s.key_ids.clear();
  }
  detail::g_recording.store(true);
}

std::vector<OpTime> profile_end() {
  detail::g_recording.store(false);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<OpTime> times(s.keys.size());
  for (size_t i = 0; i < times.size(); ++i) {
    times[i].key = s.keys[i];
    times[i].op = s.key_ops[i];
  }
  for (Record& r : s.records) {
    double ms = r.host_ms;
#ifdef VLM_HAVE_CUDA
    if (r.start && r.end) {
      float f = 0;
      VLM_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(r.end)) == cudaSuccess,
                "op profile: cudaEventSynchronize failed");
      VLM_CHECK(cudaEventElapsedTime(&f, static_cast<cudaEvent_t>(r.start), static_cast<cudaEvent_t>(r.end)) ==
                    cudaSuccess,
                "op profile: cudaEventElapsedTime failed");
      ms = f;
    }
#endif
    times[static_cast<size_t>(r.key)].calls += 1;
    times[static_cast<size_t>(r.key)].ms += ms;
  }
  std::sort(times.begin(), times.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return times;
}

ProfileScope::ProfileScope(const char* label) {
  if (!recording()) return;
  active_ = true;
  t_scopes.push_back(t_scopes.empty() ? std::string(label) : t_scopes.back() + "/" + label);
}

ProfileScope::~ProfileScope() {
  if (active_ && !t_scopes.empty()) t_scopes.pop_back();
}

OpRange::OpRange(const char* op, Device device) {
  if (!recording()) return;
  if (t_depth++ > 0) {  // an op inside an op: counted as part of the outer one
    slot_ = -2;
    return;
  }
  std::string key = (t_scopes.empty() ? std::string() : t_scopes.back() + "/") + op;
  if (!t_tag.empty()) key += " " + t_tag;
  t_tag.clear();
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto [it, inserted] = s.key_ids.emplace(key, static_cast<int>(s.keys.size()));
  if (inserted) {
    s.keys.push_back(key);
    s.key_ops.push_back(op);
  }
  Record r;
  r.key = it->second;
  r.device = device;
#ifdef VLM_HAVE_CUDA
  if (device.is_cuda()) {
    r.start = take_event(s);
    r.end = take_event(s);
    record_event(r.start, device);
  }
#endif
  if (!device.is_cuda()) r.host_start = host_now_ms();
  slot_ = static_cast<int64_t>(s.records.size());
  s.records.push_back(r);
}

OpRange::~OpRange() {
  if (slot_ == -1) return;
  --t_depth;
  if (slot_ < 0) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (static_cast<size_t>(slot_) >= s.records.size()) return;  // the profile was restarted meanwhile
  Record& r = s.records[static_cast<size_t>(slot_)];
#ifdef VLM_HAVE_CUDA
  if (r.end) {
    record_event(r.end, r.device);
    return;
  }
#endif
  r.host_ms = host_now_ms() - r.host_start;
}

}  // namespace vlm::ops::profile
