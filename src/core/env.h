// Integer settings from environment variables (VLM_GEMM_AUTOTUNE, VLM_FLASH_PERSISTENT, ...): one parser, so every
// variable accepts the same spellings and a bad value is a fatal error that names the variable.
#pragma once

#include <atomic>
#include <string>

namespace vlm {

// The value of environment variable `name` as an integer in [lo, hi], or `fallback` when it is unset or empty.
// Only plain decimal integers are accepted ("0", "12", "-3"; not "+1", " 1", "01" or "1x"); anything else, or a value
// out of range, aborts with a message naming the variable (VLM_CHECK).
int env_int(const char* name, int fallback, int lo, int hi);

// An on/off setting that code may set, and that until then reads environment variable `name` (0 or 1, by env_int's
// rules; `fallback` when unset) on the first on(): e.g. ops::set_attention_deterministic over
// VLM_ATTENTION_DETERMINISTIC. Thread-safe; meant for namespace-scope objects.
class EnvSwitch {
 public:
  constexpr EnvSwitch(const char* name, bool fallback) : name_(name), fallback_(fallback) {}
  bool on();
  void set(bool on) { state_.store(on ? 1 : 0); }

 private:
  const char* name_;
  bool fallback_;
  std::atomic<int> state_{-1};  // -1: not decided yet
};

// Every environment variable named VLM_*, as "NAME=value" joined by single spaces in name order ("" when none): what
// benchmarks print in their header, so an A/B run's log says which switches it ran under.
std::string vlm_environment();

}  // namespace vlm
