// CheckpointManager implementation.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/logging.h"
#include "core/safetensors.h"

namespace vlm {
namespace fs = std::filesystem;

namespace {
std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

// Parses "step_00000200" -> 200; -1 for anything else (".tmp" folders included).
int64_t parse_step_name(const std::string& name) {
  if (name.size() != 13 || name.rfind("step_", 0) != 0) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}
}  // namespace

CheckpointManager::CheckpointManager(std::string dir, int keep_last) : dir_(std::move(dir)), keep_last_(keep_last) {}

Status CheckpointManager::save(int64_t step, const std::function<Status(const std::string&)>& write_contents) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return io_error(dir_ + ": " + ec.message());
  const std::string final_dir = dir_ + "/" + step_name(step);
  const std::string tmp_dir = final_dir + ".tmp";
  fs::remove_all(tmp_dir, ec);
  fs::create_directories(tmp_dir, ec);
  if (ec) return io_error(tmp_dir + ": " + ec.message());
  VLM_RETURN_IF_ERROR(write_contents(tmp_dir).with_context("writing checkpoint " + tmp_dir));
  fsync_dir(tmp_dir);
  fs::remove_all(final_dir, ec);  // a checkpoint of the same step from an earlier attempt
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) return io_error("rename " + tmp_dir + " -> " + final_dir + ": " + ec.message());
  fsync_dir(dir_);
  const std::string latest = step_name(step) + "\n";
  VLM_RETURN_IF_ERROR(write_file_atomic(dir_ + "/latest", latest.data(), latest.size()));
  auto all = list();
  for (size_t i = 0; i + static_cast<size_t>(keep_last_) < all.size(); ++i) {
    fs::remove_all(all[i].path, ec);
    if (ec) VLM_WARN("could not remove old checkpoint ", all[i].path, ": ", ec.message());
  }
  return Status();
}

std::vector<CheckpointInfo> CheckpointManager::list() const {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    if (!e.is_directory()) continue;
    int64_t step = parse_step_name(e.path().filename().string());
    if (step >= 0) out.push_back({step, e.path().string()});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::optional<CheckpointInfo> CheckpointManager::latest() const {
  auto all = list();
  if (all.empty()) return std::nullopt;
  return all.back();
}

}  // namespace vlm
