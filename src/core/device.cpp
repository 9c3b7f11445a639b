// Device parsing and CUDA discovery (compiled without CUDA, it reports no devices).
#include "core/device.h"

#include <cstdlib>

#ifdef VLM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace vlm {

std::string Device::to_string() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

Expected<Device> parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda" || text == "gpu") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string n = text.substr(5);
    char* end = nullptr;
    long idx = std::strtol(n.c_str(), &end, 10);
    if (!n.empty() && *end == '\0' && idx >= 0 && idx < 1024) return Device::cuda(static_cast<int>(idx));
  }
  return invalid_argument("unknown device '" + text + "' (expected cpu, cuda or cuda:N)");
}

int cuda_device_count() {
#ifdef VLM_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

bool cuda_available() { return cuda_device_count() > 0; }

}  // namespace vlm
