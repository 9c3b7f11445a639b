// MemoryReport: sizes per category, measured over the first training step.
#include "train/memory_report.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/status.h"

namespace vlm {

namespace {
// "12.34 MiB"
std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}
}  // namespace

std::string MemoryReport::to_json() const {
  nlohmann::json j;
  j["device"] = device;
  j["precision"] = precision;
  j["parameters_bytes"] = parameter_bytes();
  j["parameters_master_bytes"] = master_weight_bytes;
  j["parameters_compute_copy_bytes"] = compute_copy_bytes;
  j["gradients_bytes"] = gradient_bytes;
  j["optimizer_moments_bytes"] = optimizer_bytes;
  j["activations_peak_bytes"] = activation_peak_bytes;
  j["step_start_bytes"] = step_start_bytes;
  j["step_peak_bytes"] = step_peak_bytes;
  j["reserved_bytes"] = reserved_bytes;
  if (!fsdp_json.empty()) j["fsdp"] = nlohmann::json::parse(fsdp_json);
  j["source"] = device == "cpu" ? "cpu allocator counters (process-wide: include the data loader's buffers)"
                                : "device caching allocator counters over the first step";
  return j.dump(2) + "\n";
}

std::string MemoryReport::summary() const {
  return str("memory on ", device, " (", precision, "), first step: parameters ", mib(parameter_bytes()), " (master ",
             mib(master_weight_bytes), " + compute copies ", mib(compute_copy_bytes), "), gradients ",
             mib(gradient_bytes), ", optimizer moments ", mib(optimizer_bytes), ", activations peak ",
             mib(activation_peak_bytes), "; step peak ", mib(step_peak_bytes), ", reserved ", mib(reserved_bytes));
}

StepMemoryMeter::StepMemoryMeter(Device device) : device_(device) {}

void StepMemoryMeter::begin() {
  Allocator& a = allocator_for(device_);
  a.reset_peak();
  start_bytes_ = a.stats().bytes_in_use;
}

MemoryReport StepMemoryMeter::end(const ParameterStore& params, uint64_t optimizer_bytes,
                                  const std::string& precision) const {
  const AllocatorStats s = allocator_for(device_).stats();
  MemoryReport r;
  r.device = device_.to_string();
  r.precision = precision;
  for (const auto& p : params.all()) {
    r.master_weight_bytes += p.value.nbytes();
    if (p.compute.defined()) r.compute_copy_bytes += p.compute.nbytes();
  }
  r.gradient_bytes = params.grad_bytes();
  r.optimizer_bytes = optimizer_bytes;
  r.step_start_bytes = start_bytes_;
  r.step_peak_bytes = std::max(s.peak_bytes_in_use, start_bytes_);
  r.activation_peak_bytes = r.step_peak_bytes - start_bytes_;
  r.reserved_bytes = s.bytes_reserved;
  return r;
}

}  // namespace vlm
