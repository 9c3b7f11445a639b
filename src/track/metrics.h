// Metric sinks: one interface, several outputs (console progress line, JSONL file; TensorBoard event files come
// later). A record is a step number, a kind ("train", "eval") and named scalar values.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace vlm {

struct MetricRecord {
  int64_t step = 0;
  std::string kind = "train";
  std::vector<std::pair<std::string, double>> values;

  MetricRecord& add(const std::string& name, double value) {
    values.emplace_back(name, value);
    return *this;
  }
  // nullopt-like lookup: returns false when absent.
  bool get(const std::string& name, double* value) const;
};

class MetricSink {
 public:
  virtual ~MetricSink() = default;
  virtual void write(const MetricRecord& record) = 0;
  virtual void flush() {}
};

// Appends one JSON object per record to a file: {"step": 3, "kind": "train", "loss": 2.1, ...}. Each line is
// flushed, so a crash loses nothing already written.
class JsonlSink final : public MetricSink {
 public:
  // Opens `path` for appending. With `keep_through_step` >= 0, first drops every existing record whose step is
  // greater (a resumed run rewrites the steps after its checkpoint).
  static Expected<std::unique_ptr<JsonlSink>> open(const std::string& path, int64_t keep_through_step = -1);
  ~JsonlSink() override;
  void write(const MetricRecord& record) override;
  void flush() override;

 private:
  explicit JsonlSink(FILE* f) : f_(f) {}
  FILE* f_;
};

// Reads a metrics.jsonl back (tests and reports use this, never printed columns).
Expected<std::vector<MetricRecord>> read_jsonl_metrics(const std::string& path);

// A one-line progress display: "step 120/2000 [=====>    ] 6% loss 1.234 lr 3.0e-04 41.2 samples/s ETA 3m12s".
// On a terminal the line is redrawn in place; otherwise a full line is printed every `every_seconds`.
class ConsoleProgress final : public MetricSink {
 public:
  ConsoleProgress(int64_t total_steps, int64_t start_step, double every_seconds = 10.0);
  void write(const MetricRecord& record) override;
  void flush() override;  // ends the in-place line

 private:
  int64_t total_, start_;
  double every_;
  double t0_, last_print_ = -1e30;
  bool tty_;
  bool dirty_ = false;
};

// Fans records out to several sinks.
class MultiSink final : public MetricSink {
 public:
  void add(std::unique_ptr<MetricSink> sink) { sinks_.push_back(std::move(sink)); }
  void write(const MetricRecord& record) override;
  void flush() override;

 private:
  std::vector<std::unique_ptr<MetricSink>> sinks_;
};

// Seconds since an arbitrary fixed point (steady clock).
double now_seconds();
// "3m12s", "1h02m", "45s".
std::string format_duration(double seconds);

}  // namespace vlm
