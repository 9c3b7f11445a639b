// The run directory: everything a run produces lives in one folder.
//   config.toml       the resolved configuration (every option, defaults included)
//   run.json          command line, git revision, host, hardware, start time
//   metrics.jsonl     one JSON object per logged step / eval
//   eval/             eval results as JSON
//   checkpoints/      step_XXXXXXXX/ folders and the `latest` pointer
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace vlm {

// Creates `dir` (and parents) if needed.
Status ensure_dir(const std::string& dir);
// Writes run.json: argv, git revision (if the binary was started inside a git checkout), hostname, CPU count,
// CUDA devices, start time (UTC).
Status write_run_info(const std::string& dir, const std::vector<std::string>& argv);
// UTC timestamp "2026-12-02T13:09:49Z".
std::string utc_timestamp();
// The git revision of the working directory, or "unknown".
std::string git_revision();

}  // namespace vlm
