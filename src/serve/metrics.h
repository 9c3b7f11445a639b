// What `GET /metrics` reports, in Prometheus' text format: counters the HTTP threads and the engine thread bump,
// latency histograms (time to first token, time between tokens, whole-request latency), and the gauges of the
// engine's last step (queue, running requests, KV blocks, cache hit rates). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "infer/engine.h"

namespace vlm::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implied
  void observe(double value);
  // The # HELP / # TYPE lines and the _bucket, _sum and _count samples.
  void render(const std::string& name, const std::string& help, std::string& out) const;
  // The q-quantile (0..1) by linear interpolation inside the bucket (what histogram_quantile computes).
  double quantile(double q) const;
  int64_t count() const;

 private:
  mutable std::mutex mutex_;
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative), the last one +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

// The engine loop's state after its last step.
struct EngineSnapshot {
  infer::EngineStats engine;
  int64_t waiting = 0;  // accepted, not yet computing: the loop's queue and the engine's waiting sequences
  int64_t running = 0;  // sequences the engine is computing
};

class ServeMetrics {
 public:
  ServeMetrics();
  void count_request(const std::string& endpoint, int status);
  void add_tokens(int64_t prompt, int64_t generated);
  void observe_first_token(double seconds) { ttft_.observe(seconds); }
  void observe_inter_token(double seconds) { inter_token_.observe(seconds); }
  void observe_request(double seconds) { latency_.observe(seconds); }
  void count_cancelled() { cancelled_.fetch_add(1); }
  void count_rejected() { rejected_.fetch_add(1); }
  std::string render(const EngineSnapshot& s) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;  // (endpoint, status) -> count
  std::atomic<int64_t> prompt_tokens_{0}, generated_tokens_{0}, cancelled_{0}, rejected_{0};
  Histogram ttft_, inter_token_, latency_;
};

}  // namespace vlm::serve
