// env_int: see env.h.
#include "core/env.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>  // environ

#include "core/status.h"

namespace vlm {

bool EnvSwitch::on() {
  int v = state_.load();
  if (v < 0) {
    v = env_int(name_, fallback_ ? 1 : 0, 0, 1);
    state_.store(v);
  }
  return v == 1;
}

namespace {
// "-?(0|[1-9][0-9]*)", at most 9 digits (so the value fits an int before the range check).
bool plain_decimal(const char* s) {
  if (*s == '-') ++s;
  if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] != '\0')) return false;
  int digits = 0;
  for (; *s != '\0'; ++s, ++digits)
    if (*s < '0' || *s > '9' || digits == 9) return false;
  return true;
}
}  // namespace

int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  const bool decimal = plain_decimal(v);
  const long x = decimal ? std::strtol(v, nullptr, 10) : 0;
  VLM_CHECK(decimal && x >= lo && x <= hi, name, " must be an integer in [", lo, ", ", hi, "], not '", v, "'");
  return static_cast<int>(x);
}

std::string vlm_environment() {
  std::vector<std::string> vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    if (std::strncmp(*e, "VLM_", 4) == 0) vars.emplace_back(*e);
  std::sort(vars.begin(), vars.end());
  std::string out;
  for (const std::string& v : vars) out += (out.empty() ? "" : " ") + v;
  return out;
}

}  // namespace vlm
