// Integer settings from environment variables (VLM_GEMM_AUTOTUNE, VLM_FLASH_PERSISTENT, ...): one parser, so every
// variable accepts the same spellings and a bad value is a fatal error that names the variable.
#pragma once

#include <string>

namespace vlm {

// The value of environment variable `name` as an integer in [lo, hi], or `fallback` when it is unset or empty.
// Only plain decimal integers are accepted ("0", "12", "-3"; not "+1", " 1", "01" or "1x"); anything else, or a value
// out of range, aborts with a message naming the variable (VLM_CHECK).
int env_int(const char* name, int fallback, int lo, int hi);

// Every environment variable named VLM_*, as "NAME=value" joined by single spaces in name order ("" when none): what
// benchmarks print in their header, so an A/B run's log says which switches it ran under.
std::string vlm_environment();

}  // namespace vlm
