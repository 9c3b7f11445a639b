// ProgressLine implementation.
#include "track/progress.h"

#include <unistd.h>

#include <cstdio>

#include "track/metrics.h"

namespace vlm {

ProgressLine::ProgressLine(std::string label, uint64_t total, double every_seconds)
    : label_(std::move(label)), total_(total), every_(every_seconds), t0_(now_seconds()), tty_(isatty(2)) {}

double ProgressLine::elapsed_seconds() const { return now_seconds() - t0_; }

void ProgressLine::update(uint64_t done, const std::string& extra) {
  const double t = now_seconds();
  if (t - last_ < (tty_ ? 0.1 : every_)) return;
  last_ = t;
  print(done, extra, false);
}

void ProgressLine::finish(uint64_t done, const std::string& extra) { print(done, extra, true); }

void ProgressLine::clear() {
  if (tty_) std::fprintf(stderr, "\r\033[K");
  last_ = -1e30;  // redraw at the next update
}

void ProgressLine::print(uint64_t done, const std::string& extra, bool final) {
  const double dt = now_seconds() - t0_;
  const double rate = dt > 0 ? static_cast<double>(done) / dt : 0;
  char buf[256];
  int n = std::snprintf(buf, sizeof(buf), "%s  %llu", label_.c_str(), static_cast<unsigned long long>(done));
  if (total_ > 0)
    n += std::snprintf(buf + n, sizeof(buf) - static_cast<size_t>(n), "/%llu  %5.1f%%",
                       static_cast<unsigned long long>(total_), 100.0 * static_cast<double>(done) / total_);
  n += std::snprintf(buf + n, sizeof(buf) - static_cast<size_t>(n), "  %.0f/s", rate);
  if (final)
    n += std::snprintf(buf + n, sizeof(buf) - static_cast<size_t>(n), "  in %s", format_duration(dt).c_str());
  else if (total_ > 0 && rate > 0)
    n += std::snprintf(buf + n, sizeof(buf) - static_cast<size_t>(n), "  ETA %s",
                       format_duration(static_cast<double>(total_ - std::min(done, total_)) / rate).c_str());
  if (tty_)
    std::fprintf(stderr, "\r%s  %s\033[K%s", buf, extra.c_str(), final ? "\n" : "");
  else
    std::fprintf(stderr, "%s  %s\n", buf, extra.c_str());
}

}  // namespace vlm
