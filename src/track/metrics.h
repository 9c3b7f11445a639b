// Metric sinks: one interface, several outputs (console progress line, JSONL file, TensorBoard event files). A record
// is a step number, a kind ("train", "eval"), named scalar values and, for sinks that show them, images, markdown
// text and histograms. A scalar's name may carry its own group ("eval/vqa/accuracy"); a bare name is grouped under
// the record's kind ("loss" -> "train/loss") where a sink groups (metric_tag()).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace vlm {

// A PNG image with a description shown beside it (an eval sample with its question, answer and prediction).
struct MetricImage {
  std::string tag;
  int width = 0, height = 0;
  std::string png;  // encoded bytes
  std::string description;
};

// Markdown text: the resolved config, a table of eval examples.
struct MetricText {
  std::string tag;
  std::string markdown;
};

// A distribution of values (e.g. per-module weight norms), bucketed by the sink.
struct MetricHistogram {
  std::string tag;
  std::vector<double> values;
};

// One run-file option as TensorBoard's hparams dashboard shows it: a number, a string or a boolean.
struct HParam {
  enum class Kind { number, text, boolean };
  std::string name;  // "train.lr"
  Kind kind = Kind::number;
  double number = 0;
  std::string text;
  bool flag = false;
  std::string to_string() const;  // the value as the config diff shows it
};

struct MetricRecord {
  int64_t step = 0;
  std::string kind = "train";
  std::vector<std::pair<std::string, double>> values;
  std::vector<MetricImage> images;  // the JSONL and console sinks write scalars only
  std::vector<MetricText> texts;
  std::vector<MetricHistogram> histograms;

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
  // The run's settings when it starts and its outcome when it ends (TensorBoard's hparams sessions); sinks without
  // sessions ignore them.
  virtual void session_start(const std::vector<HParam>& hparams) { (void)hparams; }
  virtual void session_end(bool success) { (void)success; }
};

// The grouped name of a scalar: `name` itself when it holds a '/', else "<kind>/<name>".
std::string metric_tag(const std::string& kind, const std::string& name);

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
  void session_start(const std::vector<HParam>& hparams) override;
  void session_end(bool success) override;

 private:
  std::vector<std::unique_ptr<MetricSink>> sinks_;
};

// Seconds since an arbitrary fixed point (steady clock).
double now_seconds();
// "3m12s", "1h02m", "45s".
std::string format_duration(double seconds);

}  // namespace vlm
