// Per-kernel device time from CUPTI's activity API (the GPU machine has no Nsight Systems): between trace_begin() and
// trace_end() every kernel, memcpy and memset the device runs is recorded with its start and end GPU timestamps,
// and trace_end() sums them per kernel name and measures the traced window: how long the device was busy (the union
// of all intervals, any stream), idle (no kernel, memcpy or memset running anywhere) and running work of several
// streams at once. Unlike kernels/op_profile.h nothing is added to the streams, so a kernel's time is its own, side
// streams included.
//
// CUPTI is loaded at run time (dlopen: $VLM_CUPTI_LIB when set, then libcupti.so.13, then libcupti.so), so binaries
// do not link it and run where it is absent: trace_begin() then returns an error naming the libraries it tried.
// No CUDA or CUPTI headers here. Only built with VLM_CUDA. One trace at a time per process, of one device; the host
// thread calling trace_begin/trace_end may differ from the threads launching the work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace vlm::ops::trace {

enum class RecordKind { kernel, memcpy, memset };

// One activity record: a kernel (name = its mangled name, as CUPTI gives it), a memcpy ("[memcpy HtoD]", ...) or a
// memset ("[memset]"). Timestamps are the device's, in nanoseconds.
struct TraceRecord {
  RecordKind kind = RecordKind::kernel;
  std::string name;
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t stream = 0;
};

struct KernelTime {
  std::string name;  // short_kernel_name() of a kernel, or the record's name for memcpy/memset
  int64_t calls = 0;
  double ms = 0;       // summed duration
  double mean_us = 0;  // per call
  double max_us = 0;   // longest call
};

struct TraceSummary {
  double window_ms = 0;      // first record's start to last record's end
  double busy_ms = 0;        // union of all kernel/memcpy/memset intervals (any stream)
  double idle_ms = 0;        // window - busy: nothing ran on the device
  double concurrent_ms = 0;  // sum of durations - busy: work that overlapped other work (across streams)
  int64_t kernels = 0, memcpys = 0, memsets = 0;
  int64_t dropped = 0;  // records CUPTI could not store (buffers full): the figures miss them
  int64_t invalid = 0;  // records without a start timestamp (0) or ending before they start, left out
  std::vector<KernelTime> by_kernel;  // summed per name, largest time first (ties by name)
};

// Starts recording (clearing what was recorded before): synchronizes the current device first, so the trace holds
// only work enqueued from now on. Errors: CUPTI cannot be loaded (the message names each library tried and why it
// failed), a CUPTI call failed, or a trace is already running.
Status trace_begin();
// Synchronizes the current device, flushes CUPTI's buffers, stops recording and summarizes the records.
Expected<TraceSummary> trace_end();

// The libraries trace_begin() tries to dlopen, in order: $VLM_CUPTI_LIB (when set and not empty), libcupti.so.13,
// libcupti.so.
std::vector<std::string> cupti_library_candidates();

// The pure parts, tested on the host.
// Sums the records per name (kernels under short_kernel_name) and measures the window, the busy union, idle and
// concurrent time. Records in any order; zero-length records count as calls of no duration; records with start 0
// (CUPTI's mark of an incomplete record) or end < start are left out and counted in `invalid`; `dropped` is left 0.
TraceSummary summarize(std::vector<TraceRecord> records);
// A demangled kernel name without its return type, parameter list and namespace qualifiers (at every level, so
// template arguments read "map_kernel<float, float, 2, 1, GeluBackward>"), capped at kMaxKernelNameChars (the cut
// ends in "..."), so the first template arguments stay. A name that is not mangled (a C name, as cuBLAS's kernels
// have) is only capped; nullptr gives "(unknown)".
std::string short_kernel_name(const char* mangled);
inline constexpr size_t kMaxKernelNameChars = 90;

}  // namespace vlm::ops::trace
