// Metric sinks implementation.
#include "track/metrics.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

namespace vlm {

bool MetricRecord::get(const std::string& name, double* value) const {
  for (const auto& [k, v] : values)
    if (k == name) {
      *value = v;
      return true;
    }
  return false;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  long t = std::lround(s);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof(buf), "%lds", t);
  return buf;
}

namespace {
nlohmann::json to_json(const MetricRecord& r) {
  nlohmann::json j;
  j["step"] = r.step;
  j["kind"] = r.kind;
  for (const auto& [k, v] : r.values) {
    if (std::isfinite(v))
      j[k] = v;
    else
      j[k] = std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");  // JSON has no NaN; keep it visible
  }
  return j;
}
}  // namespace

Expected<std::unique_ptr<JsonlSink>> JsonlSink::open(const std::string& path, int64_t keep_through_step) {
  if (keep_through_step >= 0 && access(path.c_str(), F_OK) == 0) {
    std::ifstream in(path);
    std::string line, kept;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded()) continue;  // a torn last line from a crash
      if (j.value("step", int64_t{0}) <= keep_through_step) kept += line + "\n";
    }
    std::ofstream out(path + ".tmp", std::ios::trunc);
    out << kept;
    out.close();
    if (!out || std::rename((path + ".tmp").c_str(), path.c_str()) != 0)
      return io_error(path + ": cannot rewrite for resume");
  }
  FILE* f = std::fopen(path.c_str(), "a");
  if (!f) return io_error(path + ": cannot open for appending");
  return std::unique_ptr<JsonlSink>(new JsonlSink(f));
}

JsonlSink::~JsonlSink() {
  if (f_) std::fclose(f_);
}

void JsonlSink::write(const MetricRecord& r) {
  if (r.values.empty()) return;  // images and text only: nothing this file holds
  std::string line = to_json(r).dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

void JsonlSink::flush() { std::fflush(f_); }

Expected<std::vector<MetricRecord>> read_jsonl_metrics(const std::string& path) {
  std::ifstream in(path);
  if (!in) return io_error(path + ": cannot open");
  std::vector<MetricRecord> out;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return parse_error(path + ":" + std::to_string(lineno) + ": not JSON");
    MetricRecord r;
    r.step = j.value("step", int64_t{0});
    r.kind = j.value("kind", std::string("train"));
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "step" || it.key() == "kind") continue;
      if (it.value().is_number()) r.values.emplace_back(it.key(), it.value().get<double>());
      if (it.value().is_string()) {
        const std::string s = it.value().get<std::string>();
        if (s == "nan") r.values.emplace_back(it.key(), NAN);
        if (s == "inf") r.values.emplace_back(it.key(), INFINITY);
        if (s == "-inf") r.values.emplace_back(it.key(), -INFINITY);
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

ConsoleProgress::ConsoleProgress(int64_t total_steps, int64_t start_step, double every_seconds)
    : total_(total_steps), start_(start_step), every_(every_seconds), t0_(now_seconds()), tty_(isatty(2)) {}

void ConsoleProgress::write(const MetricRecord& r) {
  const double t = now_seconds();
  if (r.values.empty()) return;
  if (r.kind != "train") {
    flush();
    std::string line = "[" + r.kind + " @ step " + std::to_string(r.step) + "]";
    for (const auto& [k, v] : r.values) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), " %s %.4g", k.c_str(), v);
      line += buf;
    }
    std::fprintf(stderr, "%s\n", line.c_str());
    return;
  }
  const bool last = r.step >= total_;
  if (!tty_ && !last && t - last_print_ < every_) return;
  last_print_ = t;
  const double frac = total_ > 0 ? static_cast<double>(r.step) / static_cast<double>(total_) : 1.0;
  const double done_here = static_cast<double>(r.step - start_);
  const double eta = done_here > 0 ? (t - t0_) / done_here * static_cast<double>(total_ - r.step) : NAN;
  constexpr int kBar = 20;
  const int filled = static_cast<int>(frac * kBar);
  std::string bar(static_cast<size_t>(kBar), ' ');
  for (int i = 0; i < filled && i < kBar; ++i) bar[static_cast<size_t>(i)] = '=';
  if (filled < kBar) bar[static_cast<size_t>(filled)] = '>';
  double loss = NAN, lr = NAN, sps = NAN;
  r.get("loss", &loss);
  r.get("lr", &lr);
  r.get("samples_per_s", &sps);
  char buf[256];
  std::snprintf(buf, sizeof(buf), "step %lld/%lld [%s] %3.0f%% loss %.4f lr %.2e %.1f samples/s ETA %s",
                static_cast<long long>(r.step), static_cast<long long>(total_), bar.c_str(), frac * 100, loss, lr, sps,
                format_duration(eta).c_str());
  if (tty_) {
    std::fprintf(stderr, "\r%s\033[K", buf);
    dirty_ = true;
  } else {
    std::fprintf(stderr, "%s\n", buf);
  }
}

void ConsoleProgress::flush() {
  if (dirty_) std::fprintf(stderr, "\n");
  dirty_ = false;
}

void MultiSink::write(const MetricRecord& r) {
  for (auto& s : sinks_) s->write(r);
}
void MultiSink::flush() {
  for (auto& s : sinks_) s->flush();
}
void MultiSink::session_start(const std::vector<HParam>& hparams) {
  for (auto& s : sinks_) s->session_start(hparams);
}
void MultiSink::session_end(bool success) {
  for (auto& s : sinks_) s->session_end(success);
}

std::string metric_tag(const std::string& kind, const std::string& name) {
  return name.find('/') != std::string::npos ? name : kind + "/" + name;
}

std::string HParam::to_string() const {
  switch (kind) {
    case Kind::text:
      return text;
    case Kind::boolean:
      return flag ? "true" : "false";
    case Kind::number: {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.7g", number);  // run files hold floats: no float noise
      return buf;
    }
  }
  return "";
}

}  // namespace vlm
