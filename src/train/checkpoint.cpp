// CheckpointManager implementation.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/env.h"
#include "core/logging.h"
#include "core/safetensors.h"

namespace vlm {
namespace fs = std::filesystem;

namespace {
constexpr const char* kManifest = "manifest.json";

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

// Parses "step_00000200" -> 200; -1 for anything else (".tmp", ".pruning", ".damaged" folders included).
int64_t parse_step_name(const std::string& name) {
  if (name.size() != 13 || name.rfind("step_", 0) != 0) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Test-only pause at a stage of a save or prune (VLM_TEST_CHECKPOINT_DELAY_MS), to make it a window a kill can hit.
void test_pause() {
  static const int ms = env::integer("VLM_TEST_CHECKPOINT_DELAY_MS");
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// manifest.json of a finished folder: every other file's size.
Status write_manifest(const std::string& dir) {
  nlohmann::json files = nlohmann::json::object();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file() || e.path().filename() == kManifest) continue;
    files[e.path().filename().string()] = static_cast<uint64_t>(e.file_size());
  }
  if (ec) return io_error(dir + ": " + ec.message());
  const std::string text = nlohmann::json{{"files", files}}.dump(2) + "\n";
  return write_file_atomic(dir + "/" + kManifest, text.data(), text.size());
}
}  // namespace

CheckpointManager::CheckpointManager(std::string dir, int keep_last) : dir_(std::move(dir)), keep_last_(keep_last) {}

std::string CheckpointManager::staging_dir(int64_t step) const { return dir_ + "/" + step_name(step) + ".tmp"; }

Status CheckpointManager::save(int64_t step, const std::function<Status(const std::string&)>& write_contents) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return io_error(dir_ + ": " + ec.message());
  const std::string final_dir = dir_ + "/" + step_name(step);
  const std::string tmp_dir = staging_dir(step);
  fs::remove_all(tmp_dir, ec);
  fs::create_directories(tmp_dir, ec);
  if (ec) return io_error(tmp_dir + ": " + ec.message());
  VLM_RETURN_IF_ERROR(write_contents(tmp_dir).with_context("writing checkpoint " + tmp_dir));
  test_pause();
  VLM_RETURN_IF_ERROR(write_manifest(tmp_dir).with_context("writing checkpoint " + tmp_dir));
  fsync_dir(tmp_dir);
  if (fs::exists(final_dir, ec)) {  // a checkpoint of the same step from an earlier attempt: out of the way first
    const std::string old = final_dir + ".pruning";
    fs::remove_all(old, ec);
    fs::rename(final_dir, old, ec);
    if (ec) return io_error("rename " + final_dir + " -> " + old + ": " + ec.message());
    fs::remove_all(old, ec);
  }
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) return io_error("rename " + tmp_dir + " -> " + final_dir + ": " + ec.message());
  fsync_dir(dir_);
  test_pause();
  const std::string latest = step_name(step) + "\n";
  VLM_RETURN_IF_ERROR(write_file_atomic(dir_ + "/latest", latest.data(), latest.size()));
  prune(step);
  return Status();
}

void CheckpointManager::prune(int64_t newest_step) const {
  auto all = list();
  // Only checkpoints older than the one just written count: one newer than it cannot be there (resuming sets damaged
  // ones aside), and if it were it would not make an older one redundant.
  all.erase(std::remove_if(all.begin(), all.end(), [&](const CheckpointInfo& c) { return c.step > newest_step; }),
            all.end());
  for (size_t i = 0; i + static_cast<size_t>(keep_last_) < all.size(); ++i) {
    // Out of the namespace first (atomic), then deleted: a kill in between leaves a ".pruning" folder, never a
    // half-deleted "step_" one that a resume would take for a checkpoint.
    const std::string doomed = all[i].path + ".pruning";
    std::error_code ec;
    fs::rename(all[i].path, doomed, ec);
    if (ec) {
      VLM_WARN("could not prune old checkpoint ", all[i].path, ": ", ec.message());
      continue;
    }
    fsync_dir(dir_);
    test_pause();
    fs::remove_all(doomed, ec);
    if (ec) VLM_WARN("could not remove pruned checkpoint ", doomed, ": ", ec.message());
  }
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

std::optional<CheckpointInfo> CheckpointManager::latest_valid(std::vector<DamagedCheckpoint>* damaged) const {
  auto all = list();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    Status s = verify(*it);
    if (s.ok()) return *it;
    if (damaged) damaged->push_back({*it, std::move(s)});
  }
  return std::nullopt;
}

Expected<CheckpointInfo> newest_valid_checkpoint(const std::string& run_dir, const std::string& command) {
  std::vector<DamagedCheckpoint> damaged;
  std::optional<CheckpointInfo> latest = CheckpointManager(run_dir + "/checkpoints", 1).latest_valid(&damaged);
  for (const DamagedCheckpoint& d : damaged)
    VLM_WARN(command, ": checkpoint ", d.info.path, " is damaged (", d.problem.message(), "); passed over");
  if (!latest) return not_found(run_dir + "/checkpoints holds no valid checkpoint");
  return *latest;
}

Status CheckpointManager::verify(const CheckpointInfo& c) const {
  const std::string& d = c.path;
  std::error_code ec;
  // A sharded checkpoint lists its files in fsdp_index.json (train/sharded_checkpoint.h).
  std::vector<std::string> weights = {"model.safetensors", "optimizer.safetensors"};
  if (fs::is_regular_file(d + "/fsdp_index.json", ec)) {
    Expected<std::vector<uint8_t>> index = read_file_bytes(d + "/fsdp_index.json");
    if (!index.ok()) return index.status();
    auto j = nlohmann::json::parse(index->begin(), index->end(), nullptr, false);
    if (j.is_discarded() || !j.contains("files") || !j["files"].is_array())
      return parse_error(str(d, "/fsdp_index.json: not a sharded checkpoint index (needs a \"files\" array)"));
    weights.clear();
    for (const auto& f : j["files"]) {
      if (!f.is_string()) return parse_error(str(d, "/fsdp_index.json: a file name is not a string"));
      weights.push_back(f.get<std::string>());
    }
  }
  for (const std::string& f : weights)
    if (!fs::is_regular_file(d + "/" + f, ec)) return not_found(str(d, ": ", f, " is missing"));
  if (!fs::is_regular_file(d + "/trainer_state.json", ec)) return not_found(str(d, ": trainer_state.json is missing"));
  if (fs::exists(d + "/" + kManifest, ec)) {
    Expected<std::vector<uint8_t>> bytes = read_file_bytes(d + "/" + kManifest);
    if (!bytes.ok()) return bytes.status();
    auto m = nlohmann::json::parse(bytes->begin(), bytes->end(), nullptr, false);
    if (m.is_discarded() || !m.contains("files") || !m["files"].is_object())
      return parse_error(str(d, "/", kManifest, ": not a manifest (needs a \"files\" object)"));
    for (auto it = m["files"].begin(); it != m["files"].end(); ++it) {
      const std::string path = d + "/" + it.key();
      if (!it.value().is_number_unsigned()) return parse_error(str(d, "/", kManifest, ": bad size of ", it.key()));
      if (!fs::is_regular_file(path, ec)) return not_found(str(d, ": ", it.key(), " is missing (listed in the manifest)"));
      const uint64_t want = it.value().get<uint64_t>(), have = fs::file_size(path, ec);
      if (have != want)
        return parse_error(str(d, ": ", it.key(), " has ", have, " bytes, the manifest recorded ", want,
                               have < want ? " (truncated)" : ""));
    }
  }
  for (const std::string& f : weights) {
    Expected<SafetensorsFile> st = safetensors_load(d + "/" + f);
    if (!st.ok()) return st.status();
  }
  Expected<std::vector<uint8_t>> bytes = read_file_bytes(d + "/trainer_state.json");
  if (!bytes.ok()) return bytes.status();
  auto j = nlohmann::json::parse(bytes->begin(), bytes->end(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return parse_error(str(d, "/trainer_state.json: not a JSON object (truncated or overwritten?)"));
  if (!j.contains("step") || !j["step"].is_number_integer() || !j.contains("loader_state"))
    return parse_error(str(d, "/trainer_state.json: needs an integer \"step\" and a \"loader_state\""));
  if (j["step"].get<int64_t>() != c.step)
    return parse_error(str(d, "/trainer_state.json: records step ", j["step"].get<int64_t>(), ", the folder says ",
                           c.step));
  return Status();
}

Expected<std::string> CheckpointManager::set_aside(const CheckpointInfo& c) const {
  std::error_code ec;
  std::string target = c.path + ".damaged";
  for (int k = 2; fs::exists(target, ec); ++k) target = str(c.path, ".damaged.", k);
  fs::rename(c.path, target, ec);
  if (ec) return io_error("rename " + c.path + " -> " + target + ": " + ec.message());
  fsync_dir(dir_);
  return target;
}

int CheckpointManager::clean_leftovers() const {
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return 0;
  std::vector<fs::path> leftovers;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("step_", 0) == 0 && (ends_with(name, ".tmp") || ends_with(name, ".pruning")))
      leftovers.push_back(e.path());
  }
  for (const auto& p : leftovers) {
    fs::remove_all(p, ec);
    if (ec) VLM_WARN("could not remove ", p.string(), " (left by an interrupted checkpoint write or prune): ", ec.message());
  }
  return static_cast<int>(leftovers.size());
}

}  // namespace vlm
