// `vlm report`'s data: see report.h. The page itself (HTML, CSS, the drawing script) is report_page.cpp.
#include "track/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/safetensors.h"
#include "track/config_values.h"
#include "track/metrics.h"

namespace vlm {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Distinguishable on white, in the order runs get them.
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                               "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"};

struct Run {
  std::string dir, name;
  std::vector<MetricRecord> records;
  std::vector<HParam> config;
  bool has_config = false;
  json info = json::object(), memory, examples = json::array();
};

Expected<json> read_json_file(const std::string& path) {
  VLM_ASSIGN_OR_RETURN(auto bytes, read_file_bytes(path));
  json j = json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (j.is_discarded()) return parse_error(path + ": not valid JSON");
  return j;
}

// Every "examples" array of objects anywhere in an eval result (one per task in newer results), its string fields
// kept, at most `limit` in all.
void collect_examples(const json& j, json& out, size_t limit) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "examples" && it.value().is_array()) {
        for (const json& e : it.value()) {
          if (!e.is_object() || out.size() >= limit) continue;
          json row = json::object();
          for (auto f = e.begin(); f != e.end(); ++f) {
            if (f.value().is_string())
              row[f.key()] = f.value();
            else if (f.value().is_array() || f.value().is_number() || f.value().is_boolean())
              row[f.key()] = f.value().dump();  // e.g. a list of reference answers
          }
          out.push_back(row);
        }
      } else {
        collect_examples(it.value(), out, limit);
      }
    }
  }
}

// The eval result a run's examples come from: final.json, else the step_N.json of the highest N.
std::string latest_eval_file(const std::string& dir) {
  const fs::path eval = fs::path(dir) / "eval";
  std::error_code ec;
  if (!fs::is_directory(eval, ec)) return "";
  if (fs::exists(eval / "final.json")) return (eval / "final.json").string();
  std::string best;
  long best_step = -1;
  for (const auto& e : fs::directory_iterator(eval, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0 || e.path().extension() != ".json") continue;
    const long step = std::strtol(name.c_str() + 5, nullptr, 10);
    if (step > best_step) best_step = step, best = e.path().string();
  }
  return best;
}

Expected<Run> load_run(const std::string& dir) {
  Run r;
  r.dir = dir;
  const std::string metrics = dir + "/metrics.jsonl";
  if (!fs::exists(metrics)) return not_found(dir + ": not a run directory (no metrics.jsonl)");
  VLM_ASSIGN_OR_RETURN(r.records, read_jsonl_metrics(metrics));
  if (fs::exists(dir + "/config.toml")) {
    VLM_ASSIGN_OR_RETURN(auto bytes, read_file_bytes(dir + "/config.toml"));
    VLM_ASSIGN_OR_RETURN(r.config, flatten_toml(std::string(bytes.begin(), bytes.end()), dir + "/config.toml"));
    r.has_config = true;
  }
  if (fs::exists(dir + "/run.json")) {
    VLM_ASSIGN_OR_RETURN(r.info, read_json_file(dir + "/run.json"));
  }
  if (fs::exists(dir + "/memory.json")) {
    VLM_ASSIGN_OR_RETURN(r.memory, read_json_file(dir + "/memory.json"));
  }
  if (const std::string eval = latest_eval_file(dir); !eval.empty()) {
    VLM_ASSIGN_OR_RETURN(json e, read_json_file(eval));
    collect_examples(e, r.examples, 20);
  }
  return r;
}

// Run names: the directory's last component, or more of its path while two runs would share a name.
void name_runs(std::vector<Run>& runs) {
  for (int depth = 1; depth <= 8; ++depth) {
    std::set<std::string> seen;
    bool clash = false;
    for (Run& r : runs) {
      fs::path p = fs::path(r.dir).lexically_normal();
      if (!p.has_filename()) p = p.parent_path();
      std::vector<std::string> parts;
      for (const auto& part : p) parts.push_back(part.string());
      std::string name;
      for (int i = std::max(0, static_cast<int>(parts.size()) - depth); i < static_cast<int>(parts.size()); ++i)
        name += (name.empty() ? "" : "/") + parts[static_cast<size_t>(i)];
      r.name = name;
      clash |= !seen.insert(name).second;
    }
    if (!clash) return;
  }
  for (size_t i = 0; i < runs.size(); ++i) runs[i].name += " #" + std::to_string(i + 1);
}

// A JSON number, or null for NaN / inf (JSON has neither; the plots leave a gap).
json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// One plot: per run, the (step, value) pairs of metric `name` in records of `kind`.
json series_plot(const std::vector<Run>& runs, const std::string& id, const std::string& title,
                 const std::string& kind, const std::string& name) {
  json plot = {{"id", id}, {"title", title}, {"series", json::array()}};
  for (size_t i = 0; i < runs.size(); ++i) {
    json x = json::array(), y = json::array();
    for (const MetricRecord& rec : runs[i].records) {
      double v;
      if (rec.kind == kind && rec.get(name, &v)) {
        x.push_back(rec.step);
        y.push_back(number(v));
      }
    }
    plot["series"].push_back({{"run", i}, {"x", x}, {"y", y}});
  }
  return plot;
}

bool any_run_has(const std::vector<Run>& runs, const std::string& kind, const std::string& name) {
  double v;
  for (const Run& r : runs)
    for (const MetricRecord& rec : r.records)
      if (rec.kind == kind && rec.get(name, &v)) return true;
  return false;
}

json memory_data(const std::vector<Run>& runs) {
  static const std::pair<const char*, const char*> kParts[] = {
      {"parameters_bytes", "parameters"},         {"gradients_bytes", "gradients"},
      {"optimizer_moments_bytes", "optimizer moments"}, {"activations_peak_bytes", "activations (peak)"},
      {"step_peak_bytes", "step peak"},           {"reserved_bytes", "reserved"}};
  json m = {{"labels", json::array()}, {"series", json::array()}};
  for (const auto& part : kParts) m["labels"].push_back(part.second);
  for (size_t i = 0; i < runs.size(); ++i) {
    json values = json::array();
    for (const auto& part : kParts) {
      const json& mem = runs[i].memory;
      values.push_back(mem.is_object() && mem.contains(part.first) && mem[part.first].is_number()
                           ? json(mem[part.first].get<double>())
                           : json(nullptr));
    }
    m["series"].push_back({{"run", i}, {"values", values}});
  }
  return m;
}

json config_diff(const std::vector<Run>& runs) {
  std::vector<std::string> keys;  // in the first run's order, then any others'
  std::vector<std::map<std::string, std::string>> values(runs.size());
  for (size_t i = 0; i < runs.size(); ++i)
    for (const HParam& h : runs[i].config) {
      if (std::find(keys.begin(), keys.end(), h.name) == keys.end()) keys.push_back(h.name);
      values[i][h.name] = h.to_string();
    }
  json diff = json::array();
  int same = 0;
  for (const std::string& k : keys) {
    json row = json::array();
    std::set<std::string> distinct;
    for (size_t i = 0; i < runs.size(); ++i) {
      auto it = values[i].find(k);
      const bool has = runs[i].has_config && it != values[i].end();
      row.push_back(has ? json(it->second) : json(nullptr));
      distinct.insert(has ? "=" + it->second : "(absent)");
    }
    if (distinct.size() > 1) diff.push_back({{"key", k}, {"values", row}});
    else ++same;
  }
  return {{"differ", diff}, {"same", same}};
}

}  // namespace

Expected<std::string> build_report_data(const std::vector<std::string>& run_dirs) {
  if (run_dirs.empty()) return invalid_argument("report: no run directory given");
  std::vector<Run> runs;
  for (const std::string& d : run_dirs) {
    VLM_ASSIGN_OR_RETURN(Run r, load_run(d));
    runs.push_back(std::move(r));
  }
  name_runs(runs);

  json plots = json::array();
  plots.push_back(series_plot(runs, "loss", "training loss", "train", "loss"));
  plots.push_back(series_plot(runs, "lr", "learning rate", "train", "lr"));
  plots.push_back(series_plot(runs, "grad_norm", "gradient norm (before clipping)", "train", "grad_norm"));
  plots.push_back(series_plot(runs, "throughput", "throughput (samples/s)", "train", "samples_per_s"));
  if (any_run_has(runs, "train", "mfu"))
    plots.push_back(series_plot(runs, "mfu", "MFU (model FLOPs / device peak)", "train", "mfu"));
  else
    plots.push_back(series_plot(runs, "mfu", "model TFLOP/s (no MFU: device peak unknown)", "train", "tflops"));
  plots.push_back(series_plot(runs, "data_wait", "data wait (fraction of step time)", "train", "data_wait_frac"));
  std::vector<std::string> eval_names;  // every eval scalar of any run, in first-seen order
  for (const Run& r : runs)
    for (const MetricRecord& rec : r.records)
      if (rec.kind == "eval")
        for (const auto& kv : rec.values)
          if (std::find(eval_names.begin(), eval_names.end(), kv.first) == eval_names.end())
            eval_names.push_back(kv.first);
  for (size_t i = 0; i < eval_names.size(); ++i)
    plots.push_back(series_plot(runs, "eval_" + std::to_string(i), metric_tag("eval", eval_names[i]), "eval",
                                eval_names[i]));

  json jruns = json::array();
  for (size_t i = 0; i < runs.size(); ++i)
    jruns.push_back({{"name", runs[i].name}, {"dir", runs[i].dir}, {"color", kColors[i % std::size(kColors)]},
                     {"info", runs[i].info}, {"examples", runs[i].examples}});
  const json data = {{"runs", jruns}, {"plots", plots}, {"memory", memory_data(runs)}, {"config", config_diff(runs)}};
  return data.dump(-1, ' ', false, json::error_handler_t::replace);
}

Expected<std::string> build_report_html(const std::vector<std::string>& run_dirs) {
  VLM_ASSIGN_OR_RETURN(std::string data, build_report_data(run_dirs));
  // '<' only occurs inside JSON strings: escaping it keeps "</script>" and "<!--" in a value from ending the block.
  std::string safe;
  safe.reserve(data.size());
  for (char c : data) safe += c == '<' ? std::string("\\u003c") : std::string(1, c);
  return report_page(safe);
}

}  // namespace vlm
