// Logging implementation: level from VLM_LOG_LEVEL (debug|info|warn|error|off) at first use.
#include "core/logging.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

#include "core/env.h"

namespace vlm {
namespace {
LogLevel initial_level() {
  const std::string level = env::text("VLM_LOG_LEVEL");
  if (level == "debug") return LogLevel::debug;
  if (level == "warn") return LogLevel::warn;
  if (level == "error") return LogLevel::error;
  if (level == "off") return LogLevel::off;
  return LogLevel::info;
}
std::atomic<int>& level_ref() {
  static std::atomic<int> level{static_cast<int>(initial_level())};
  return level;
}
std::atomic<int> g_rank{-1};
std::mutex g_log_mutex;
}  // namespace

void set_log_level(LogLevel level) { level_ref() = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(level_ref().load()); }
void set_log_rank(int rank) { g_rank = rank; }
int log_rank() { return g_rank.load(); }

void log_message(LogLevel level, const std::string& message) {
  static const char* kNames[] = {"debug", "info", "warn", "error", "off"};
  std::lock_guard<std::mutex> lock(g_log_mutex);
  int rank = g_rank.load();
  if (rank >= 0)
    std::fprintf(stderr, "[%s r%d] %s\n", kNames[static_cast<int>(level)], rank, message.c_str());
  else
    std::fprintf(stderr, "[%s] %s\n", kNames[static_cast<int>(level)], message.c_str());
}

}  // namespace vlm
