// `vlm bench train`'s kernel trace (see kernel_trace_report.h). Without VLM_HAVE_CUDA only the "no trace" line.
#include "bench/train/kernel_trace_report.h"

#include <cstdarg>
#include <cstdio>

#include "core/status.h"
#ifdef VLM_HAVE_CUDA
#include "kernels/cuda/kernel_trace.h"
#endif

namespace vlm::bench {

#ifdef VLM_HAVE_CUDA
namespace {

void appendf(std::string& out, const char* fmt, ...) {
  char line[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  out += line;
}

std::string format_trace(const ops::trace::TraceSummary& t, int steps, int top) {
  const double n = steps;
  std::string out;
  appendf(out, "\nkernel trace: %d steps, window %.3f ms/step, busy %.3f, idle %.3f (%.1f%%), concurrent %.3f\n",
          steps, t.window_ms / n, t.busy_ms / n, t.idle_ms / n, t.window_ms > 0 ? 100 * t.idle_ms / t.window_ms : 0.0,
          t.concurrent_ms / n);
  out += "  (CUPTI: every kernel, memcpy and memset with its own device start and end; busy: something ran on some\n"
         "  stream; idle: nothing ran; concurrent: summed durations minus busy, the work that ran beside other work)\n";
  appendf(out, "  %lld kernels, %lld memcpys, %lld memsets per step", static_cast<long long>(t.kernels / steps),
          static_cast<long long>(t.memcpys / steps), static_cast<long long>(t.memsets / steps));
  if (t.dropped > 0 || t.invalid > 0) {
    appendf(out, "; %lld records dropped, %lld invalid: the figures miss them", static_cast<long long>(t.dropped),
            static_cast<long long>(t.invalid));
  }
  appendf(out, "\n  %-*s %10s %9s %6s %9s\n", static_cast<int>(ops::trace::kMaxKernelNameChars), "kernel", "calls/step",
          "ms/step", "busy", "mean us");
  double rest_ms = 0;
  int64_t rest = 0;
  for (size_t i = 0; i < t.by_kernel.size(); ++i) {
    const ops::trace::KernelTime& k = t.by_kernel[i];
    if (static_cast<int>(i) >= top) {
      rest_ms += k.ms;
      ++rest;
      continue;
    }
    appendf(out, "  %-*s %10.1f %9.3f %5.1f%% %9.1f\n", static_cast<int>(ops::trace::kMaxKernelNameChars),
            k.name.c_str(), static_cast<double>(k.calls) / n, k.ms / n, t.busy_ms > 0 ? 100 * k.ms / t.busy_ms : 0.0,
            k.mean_us);
  }
  if (rest > 0) appendf(out, "  (%lld more names: %.3f ms/step)\n", static_cast<long long>(rest), rest_ms / n);
  return out;
}

nlohmann::json trace_json(const ops::trace::TraceSummary& t, int steps) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const ops::trace::KernelTime& k : t.by_kernel) {
    kernels.push_back(
        {{"name", k.name}, {"calls", k.calls}, {"ms", k.ms}, {"mean_us", k.mean_us}, {"max_us", k.max_us}});
  }
  const double n = steps;
  return {{"steps", steps},
          {"window_ms", t.window_ms},
          {"busy_ms", t.busy_ms},
          {"idle_ms", t.idle_ms},
          {"concurrent_ms", t.concurrent_ms},
          {"per_step",
           {{"window_ms", t.window_ms / n}, {"busy_ms", t.busy_ms / n}, {"idle_ms", t.idle_ms / n},
            {"concurrent_ms", t.concurrent_ms / n}}},
          {"kernels", t.kernels},
          {"memcpys", t.memcpys},
          {"memsets", t.memsets},
          {"dropped", t.dropped},
          {"invalid", t.invalid},
          {"by_kernel", kernels}};
}

}  // namespace
#endif

KernelTraceReport trace_kernels(int steps, const std::function<void()>& step, int top) {
#ifdef VLM_HAVE_CUDA
  if (const Status s = ops::trace::trace_begin(); !s.ok()) {
    return {str("\nno kernel trace: ", s.message(), "\n"), nullptr};
  }
  for (int i = 0; i < steps; ++i) step();
  const Expected<ops::trace::TraceSummary> t = ops::trace::trace_end();
  if (!t.ok()) return {str("\nno kernel trace: ", t.status().message(), "\n"), nullptr};
  return {format_trace(*t, steps, top), trace_json(*t, steps)};
#else
  (void)steps, (void)step, (void)top;
  return {"\nno kernel trace: built without CUDA\n", nullptr};
#endif
}

}  // namespace vlm::bench
