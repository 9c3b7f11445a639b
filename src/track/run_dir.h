// The run directory: everything a run produces lives in one folder.
//   config.toml       the resolved configuration (every option, defaults included)
//   run.json          command line, git revision and dirty flag, host, CPU model, GPUs (name, memory, driver),
//                     start time
//   metrics.jsonl     one JSON object per logged step / eval
//   tb/               TensorBoard event files (`tensorboard --logdir <run>/tb`, or the folder above several runs)
//   memory.json       the first step's memory report
//   eval/             eval results as JSON
//   checkpoints/      step_XXXXXXXX/ folders and the `latest` pointer
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace vlm {

// Creates `dir` (and parents) if needed.
Status ensure_dir(const std::string& dir);
// Writes run.json (see above); GPUs are listed when the binary was built with CUDA and devices are visible.
Status write_run_info(const std::string& dir, const std::vector<std::string>& argv);
// UTC timestamp "2026-12-02T13:09:49Z".
std::string utc_timestamp();
// The git revision of the working directory, or "unknown".
std::string git_revision();
// Whether tracked files of the working directory's git checkout differ from HEAD; nullopt outside a checkout.
std::optional<bool> git_dirty();
// The CPU's model name (/proc/cpuinfo), or "" when unknown.
std::string cpu_model();
// argv as one shell-quoted line: what to paste to run it again.
std::string shell_command_line(const std::vector<std::string>& argv);

struct GpuInfo {
  int index = 0;
  std::string name;            // "NVIDIA H100 80GB HBM3"
  uint64_t memory_bytes = 0;
  int compute_capability = 0;  // 90 for sm_90
};
// The visible CUDA devices (none in a CPU build or without a device).
std::vector<GpuInfo> gpu_info();
// The NVIDIA driver's version ("570.124.06"), or "" when unknown.
std::string gpu_driver_version();

}  // namespace vlm
