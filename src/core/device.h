// Where a tensor lives: the CPU or one CUDA device.
#pragma once

#include <string>

#include "core/status.h"

namespace vlm {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device& o) const { return type == o.type && (type == DeviceType::cpu || index == o.index); }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string to_string() const;  // "cpu", "cuda:0"
};

// Parses "cpu", "cuda", "cuda:N", "gpu".
Expected<Device> parse_device(const std::string& text);
// True when this binary was built with CUDA and a device is visible.
bool cuda_available();
int cuda_device_count();

}  // namespace vlm
