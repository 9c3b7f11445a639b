// Device memory of one training step by category, for the run's memory.json and its start-of-training log line:
// parameters (f32 master weights + compute copies), gradients (f32), optimizer moments (f32), and the transient
// peak of the forward/backward (activations, saved tensors, kernel scratch and workspaces) measured with the device
// allocator's peak counter over the first step. Persistent sizes are sums of tensor sizes; the transient peak is
// the allocator's peak bytes in use minus what was in use when the step began.
#pragma once

#include <cstdint>
#include <string>

#include "core/allocator.h"
#include "model/parameters.h"

namespace vlm {

struct MemoryReport {
  std::string device;                // "cuda:0", "cpu"
  std::string precision;             // train.precision
  uint64_t master_weight_bytes = 0;  // f32 master weights
  uint64_t compute_copy_bytes = 0;   // bf16 compute copies (0 in fp32 mode)
  uint64_t gradient_bytes = 0;
  uint64_t optimizer_bytes = 0;      // AdamW m and v
  uint64_t step_start_bytes = 0;     // allocator bytes in use when the step began (the persistent state and inputs)
  uint64_t step_peak_bytes = 0;      // allocator peak bytes in use during the step
  uint64_t activation_peak_bytes = 0;  // step_peak_bytes - step_start_bytes
  uint64_t reserved_bytes = 0;       // held from the system after the step (caching allocator: incl. its cache)
  // Every rank's sharded-training accounting, measured and by the formula (a JSON object; empty: none):
  // {"strategy", "world_size", "units": [...], "ranks": [{"rank", "measured": {...}, "formula": {...}}]}.
  std::string fsdp_json;

  uint64_t parameter_bytes() const { return master_weight_bytes + compute_copy_bytes; }
  std::string to_json() const;
  std::string summary() const;  // one line for the log, in MiB
};

// Measures one step: begin() before the step's first allocation (resets the allocator's peak), end() after it.
class StepMemoryMeter {
 public:
  explicit StepMemoryMeter(Device device);
  void begin();
  // Fills the report from the allocator and the given persistent sizes.
  MemoryReport end(const ParameterStore& params, uint64_t optimizer_bytes, const std::string& precision) const;

 private:
  Device device_;
  uint64_t start_bytes_ = 0;
};

}  // namespace vlm
