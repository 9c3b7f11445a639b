// Prometheus text rendering of the server's counters, gauges and histograms.
#include "serve/metrics.h"

#include <cstdio>

namespace vlm::serve {

namespace {
std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}
void gauge(std::string& out, const std::string& name, const std::string& type, const std::string& help, double v) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + num(v) + "\n";
}
double rate(int64_t hits, int64_t misses) {
  return hits + misses > 0 ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0.0;
}
}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

int64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return count_;
}

double Histogram::quantile(double q) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (count_ == 0) return 0;
  const double rank = q * static_cast<double>(count_);
  int64_t below = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    if (static_cast<double>(below + counts_[i]) >= rank && counts_[i] > 0) {
      if (i == bounds_.size()) return bounds_.empty() ? 0 : bounds_.back();
      const double lo = i == 0 ? 0 : bounds_[i - 1];
      return lo + (bounds_[i] - lo) * (rank - static_cast<double>(below)) / static_cast<double>(counts_[i]);
    }
    below += counts_[i];
  }
  return bounds_.empty() ? 0 : bounds_.back();
}

void Histogram::render(const std::string& name, const std::string& help, std::string& out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  int64_t cumulative = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + (i < bounds_.size() ? num(bounds_[i]) : std::string("+Inf")) + "\"} " +
           std::to_string(cumulative) + "\n";
  }
  out += name + "_sum " + num(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

ServeMetrics::ServeMetrics()
    : ttft_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      inter_token_({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}),
      latency_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}) {}

void ServeMetrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{endpoint, status}];
}

void ServeMetrics::add_tokens(int64_t prompt, int64_t generated) {
  prompt_tokens_.fetch_add(prompt);
  generated_tokens_.fetch_add(generated);
}

std::string ServeMetrics::render(const EngineSnapshot& s) const {
  std::string out;
  out +=
      "# HELP vlm_requests_total HTTP requests answered, by endpoint and status\n"
      "# TYPE vlm_requests_total counter\n";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, n] : requests_)
      out += "vlm_requests_total{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
             std::to_string(n) + "\n";
  }
  gauge(out, "vlm_prompt_tokens_total", "counter", "prompt tokens of answered requests", prompt_tokens_.load());
  gauge(out, "vlm_generation_tokens_total", "counter", "tokens generated for answered requests",
        generated_tokens_.load());
  gauge(out, "vlm_requests_cancelled_total", "counter", "requests cancelled (client gone, timeout, shutdown)",
        cancelled_.load());
  gauge(out, "vlm_requests_rejected_total", "counter", "requests refused because the queue was full", rejected_.load());
  gauge(out, "vlm_queue_length", "gauge", "requests (or preempted sequences) accepted and waiting to compute",
        s.waiting);
  gauge(out, "vlm_running_sequences", "gauge", "sequences the engine is computing (n > 1 requests: one each)",
        s.running);
  gauge(out, "vlm_kv_blocks_total", "gauge", "KV cache blocks", s.engine.blocks.total);
  gauge(out, "vlm_kv_blocks_used", "gauge", "KV cache blocks held by sequences", s.engine.blocks.used);
  gauge(out, "vlm_kv_blocks_free", "gauge", "KV cache blocks free (cached prefixes included)", s.engine.blocks.free);
  gauge(out, "vlm_kv_blocks_cached", "gauge", "free KV blocks still holding a reusable prefix", s.engine.blocks.cached);
  gauge(out, "vlm_prefix_cache_hit_rate", "gauge", "prefix-cache block lookups that hit",
        rate(s.engine.blocks.hits, s.engine.blocks.misses));
  gauge(out, "vlm_prefix_cache_hit_tokens_total", "counter", "prompt tokens whose KV came from the prefix cache",
        s.engine.prefix_hit_tokens);
  gauge(out, "vlm_image_cache_hit_rate", "gauge", "image-embedding cache lookups that hit",
        rate(s.engine.image_cache_hits, s.engine.image_cache_misses));
  gauge(out, "vlm_engine_steps_total", "counter", "engine steps (batched forwards)", s.engine.steps);
  gauge(out, "vlm_preemptions_total", "counter", "sequences preempted for KV blocks", s.engine.preemptions);
  ttft_.render("vlm_time_to_first_token_seconds", "from the request's arrival to its first generated token", out);
  inter_token_.render("vlm_inter_token_latency_seconds", "between consecutive tokens of one completion", out);
  latency_.render("vlm_request_latency_seconds", "from arrival to the last token", out);
  return out;
}

}  // namespace vlm::serve
