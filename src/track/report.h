// `vlm report`: one self-contained HTML page comparing training runs. Every run directory's metrics.jsonl gives the
// curves (loss, learning rate, grad norm, throughput, MFU or model TFLOP/s, data wait, and every eval metric), its
// memory.json the memory breakdown, its config.toml the config diff against the other runs, its eval/*.json the
// eval examples and its run.json the header. Runs share each plot's axes. The page needs no network: the data is
// embedded as JSON and drawn as inline SVG by an inline script, which records what it drew in data attributes
// (data-points on each plot, data-rendered on <body>) and any script error in #js-errors, for tests.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace vlm {

// The report's data (the JSON the page embeds): "runs" (name, dir, color, run.json info, eval examples), "plots"
// (id, title, per run the steps and values), "memory" (labels, per run the bytes), "config" (the keys that differ,
// with each run's value, and how many agree). Errors name the run directory and file: a directory without
// metrics.jsonl, a malformed metrics.jsonl, config.toml, memory.json or eval JSON.
Expected<std::string> build_report_data(const std::vector<std::string>& run_dirs);

// The page around data from build_report_data(), whose '<' characters are escaped (build_report_html does it).
std::string report_page(const std::string& data_json);

// The whole page around build_report_data().
Expected<std::string> build_report_html(const std::vector<std::string>& run_dirs);

}  // namespace vlm
