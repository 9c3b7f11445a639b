// A progress line for long-running tools: "label  12,345/50,000  24.7%  1,203/s  ETA 31s  <extra>".
// On a terminal the line is redrawn in place (at most every 0.1 s); otherwise a full line is printed every
// `every_seconds`, so logs stay short. finish() prints the final line with the elapsed time.
#pragma once

#include <cstdint>
#include <string>

namespace vlm {

class ProgressLine {
 public:
  // total = 0 when unknown (no percentage or ETA then).
  ProgressLine(std::string label, uint64_t total, double every_seconds = 10.0);
  void update(uint64_t done, const std::string& extra = "");
  void finish(uint64_t done, const std::string& extra = "");
  // Erases the in-place line (on a terminal) so that other output can be printed; the next update() redraws it.
  void clear();
  double elapsed_seconds() const;

 private:
  void print(uint64_t done, const std::string& extra, bool final);
  std::string label_;
  uint64_t total_;
  double every_, t0_, last_ = -1e30;
  bool tty_;
};

}  // namespace vlm
