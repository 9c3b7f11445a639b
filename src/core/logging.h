// Leveled logging to stderr with a rank prefix. Thread-safe (one line is written atomically).
#pragma once

#include <string>

#include "core/status.h"

namespace vlm {

enum class LogLevel { debug = 0, info = 1, warn = 2, error = 3, off = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
// Rank shown in every line and in VLM_CHECK failures; -1 (the default) hides it.
void set_log_rank(int rank);
int log_rank();
void log_message(LogLevel level, const std::string& message);

}  // namespace vlm

#define VLM_LOG(level, ...)                                                              \
  do {                                                                                   \
    if (static_cast<int>(level) >= static_cast<int>(::vlm::log_level()))                 \
      ::vlm::log_message(level, ::vlm::str(__VA_ARGS__));                                \
  } while (0)
#define VLM_DEBUG(...) VLM_LOG(::vlm::LogLevel::debug, __VA_ARGS__)
#define VLM_INFO(...) VLM_LOG(::vlm::LogLevel::info, __VA_ARGS__)
#define VLM_WARN(...) VLM_LOG(::vlm::LogLevel::warn, __VA_ARGS__)
#define VLM_ERROR(...) VLM_LOG(::vlm::LogLevel::error, __VA_ARGS__)
