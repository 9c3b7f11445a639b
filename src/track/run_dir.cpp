// Run directory helpers.
#include "track/run_dir.h"

#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/device.h"
#include "core/safetensors.h"

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

std::string git_revision() {
  FILE* p = popen("git rev-parse --short HEAD 2>/dev/null", "r");
  if (!p) return "unknown";
  char buf[64] = {0};
  std::string out = fgets(buf, sizeof(buf), p) ? std::string(buf) : std::string();
  pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out.empty() ? "unknown" : out;
}

Status write_run_info(const std::string& dir, const std::vector<std::string>& argv) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  nlohmann::json j;
  j["argv"] = argv;
  j["git_revision"] = git_revision();
  j["host"] = host;
  j["cpu_threads"] = std::thread::hardware_concurrency();
  j["cuda_devices"] = cuda_device_count();
  j["started_utc"] = utc_timestamp();
  const std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  return write_file_atomic(dir + "/run.json", text.data(), text.size());
}

}  // namespace vlm
