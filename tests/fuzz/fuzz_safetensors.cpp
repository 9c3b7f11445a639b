// Fuzz target: the safetensors parser (8-byte header length, JSON header, dtype/shape/offset validation).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::make_shared<const std::vector<uint8_t>>(data, data + size);
  (void)vlm::safetensors_parse(bytes, "fuzz.safetensors");
  return 0;
}
