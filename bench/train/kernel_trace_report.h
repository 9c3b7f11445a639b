// The kernel trace of `vlm bench train`: a few training steps under CUPTI (kernels/cuda/kernel_trace.h), reported as
// the device's busy, idle and concurrent time per step and its largest kernels by device time.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace vlm::bench {

struct KernelTraceReport {
  std::string text;     // the printed report, or one line saying why there is no trace
  nlohmann::json json;  // the whole summary (every kernel; totals over `steps`), or null without a trace
};

// Runs `step` `steps` times between trace_begin and trace_end and reports the top `top` kernels. Never fails the
// benchmark: when CUPTI cannot be loaded (or the build has no CUDA) the text says so and json is null.
KernelTraceReport trace_kernels(int steps, const std::function<void()>& step, int top = 30);

}  // namespace vlm::bench
