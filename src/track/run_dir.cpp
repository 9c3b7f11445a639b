// Run directory helpers.
#include "track/run_dir.h"

#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/device.h"
#include "core/safetensors.h"

#ifdef VLM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace vlm {

Status ensure_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error(dir + ": cannot create directory: " + ec.message());
  return Status();
}

std::string utc_timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {
// The command's stdout and whether it exited 0.
std::pair<std::string, bool> run_command(const char* command) {
  FILE* p = popen(command, "r");
  if (!p) return {"", false};
  std::string out;
  char buf[256];
  while (fgets(buf, sizeof(buf), p)) out += buf;
  const int rc = pclose(p);
  return {out, rc == 0};
}
}  // namespace

std::string git_revision() {
  auto [out, ok] = run_command("git rev-parse --short HEAD 2>/dev/null");
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return ok && !out.empty() ? out : "unknown";
}

std::optional<bool> git_dirty() {
  auto [out, ok] = run_command("git status --porcelain --untracked-files=no 2>/dev/null");
  if (!ok) return std::nullopt;
  return !out.empty();
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    const size_t b = v.find_first_not_of(" \t");
    return b == std::string::npos ? "" : v.substr(b);
  }
  return "";
}

std::string shell_command_line(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                         "0123456789-_./=:,+@%") == std::string::npos;
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

std::vector<GpuInfo> gpu_info() {
  std::vector<GpuInfo> out;
#ifdef VLM_HAVE_CUDA
  const int n = cuda_device_count();
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    out.push_back({i, prop.name, static_cast<uint64_t>(prop.totalGlobalMem), prop.major * 10 + prop.minor});
  }
#endif
  return out;
}

std::string gpu_driver_version() {
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  ..." names the driver itself (the CUDA runtime
  // only knows the CUDA version it supports).
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (std::getline(in, line)) {
    const size_t k = line.find("Kernel Module");
    if (k != std::string::npos) {
      size_t b = line.find_first_not_of(' ', k + 13);
      size_t e = b == std::string::npos ? b : line.find(' ', b);
      if (b != std::string::npos) return line.substr(b, e == std::string::npos ? e : e - b);
    }
  }
#ifdef VLM_HAVE_CUDA
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0)
    return "CUDA " + std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
  (void)cudaGetLastError();
#endif
  return "";
}

Status write_run_info(const std::string& dir, const std::vector<std::string>& argv) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  nlohmann::json j;
  j["argv"] = argv;
  j["command_line"] = shell_command_line(argv);
  j["cwd"] = std::filesystem::current_path().string();
  j["git_revision"] = git_revision();
  if (const std::optional<bool> dirty = git_dirty()) j["git_dirty"] = *dirty;
  j["host"] = host;
  j["cpu_model"] = cpu_model();
  j["cpu_threads"] = std::thread::hardware_concurrency();
  j["cuda_devices"] = cuda_device_count();
  const std::vector<GpuInfo> gpus = gpu_info();
  if (!gpus.empty()) {
    nlohmann::json list = nlohmann::json::array();
    for (const GpuInfo& g : gpus)
      list.push_back({{"index", g.index}, {"name", g.name}, {"memory_bytes", g.memory_bytes},
                      {"memory_gib", static_cast<double>(g.memory_bytes) / (1ull << 30)},
                      {"compute_capability", g.compute_capability}});
    j["gpus"] = list;
    j["gpu_driver"] = gpu_driver_version();
  }
  j["started_utc"] = utc_timestamp();
  const std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  return write_file_atomic(dir + "/run.json", text.data(), text.size());
}

}  // namespace vlm
