// The registry of environment variables and its accessors (see env.h).
#include "core/env.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>  // environ

#include "core/status.h"

namespace vlm::env {

namespace {

// The default of the Hopper kernels' forced choices: unset, each problem gets the kernel path its shape calls for.
// Tests and sanitizer passes reach the other paths through them; A/B runs compare both on one binary.
constexpr const char* kAutomatic = "automatic";

const std::vector<Var> kRegistry = {
    // ---- user
    {"VLM_DEMO_TRAIN_SAMPLES", Kind::integer, Audience::user, "50000", nullptr, "scripts/demo.sh",
     "training samples of the shapes dataset the demo renders", 1, 1 << 30},
    {"VLM_DIST_TIMEOUT_S", Kind::integer, Audience::user, "600", nullptr, "vlm",
     "seconds a collective, or the rendezvous of a launch's ranks, may wait before the job ends with an error naming "
     "the rank, the collective and its size", 1, 7 * 24 * 3600},
    {"VLM_FLASH_LIB", Kind::path, Audience::user, nullptr, "none", "python/vlm_flash.py",
     "libvlm_flash_c.so for vlm_flash.load() called without a path (tests/python/test_vlm_flash.py too)"},
    {"VLM_JOBS", Kind::integer, Audience::user, nullptr, "all cores", "scripts/build.sh, scripts/fuzz.sh",
     "parallel compile jobs", 1, 1 << 16},
    {"VLM_LOG_LEVEL", Kind::choice, Audience::user, "info", nullptr, "vlm",
     "the least severe log messages printed to stderr", 0, 0, "debug|info|warn|error|off"},
    {"VLM_NCCL_LIB", Kind::path, Audience::user, nullptr, "libnccl.so.2 from the loader's path", "vlm",
     "the NCCL library the GPU communicator loads (e.g. PyTorch's nvidia/nccl/lib/libnccl.so.2)"},
    {"VLM_NO_TEST_IMAGES", Kind::flag, Audience::user, "0", nullptr, "scripts/install_deps.sh",
     "1: skip the download of python3-skimage's sample images (the real-image tests then skip)"},
    // ---- benchmarking
    {"VLM_ATTENTION_FLASH", Kind::flag, Audience::benchmarking, "1", nullptr, "vlm",
     "0: bf16 CUDA attention runs the simple kernels, not FlashAttention (as `vlm bench train --attention simple`)"},
    {"VLM_CUPTI_LIB", Kind::path, Audience::benchmarking, nullptr, "libcupti.so.13, then libcupti.so", "vlm",
     "the CUPTI library the kernel trace (`vlm bench train --trace-steps`) tries first"},
    {"VLM_FLASH_CAUSAL_GROUP", Kind::integer, Audience::benchmarking, nullptr, kAutomatic, "vlm",
     "(head, sequence) pairs per group of the Hopper forward's dynamic causal tile order", 1, 1 << 30},
    // ---- debugging
    {"VLM_CUDA_SYNC", Kind::flag, Audience::debugging, "0", nullptr, "vlm",
     "1: synchronize after every CUDA launch, so an error is reported at the launch that caused it (slow)"},
    {"VLM_GEMM_AUTOTUNE_LOG", Kind::flag, Audience::debugging, "0", nullptr, "vlm",
     "1: print each autotuned GEMM's cuBLASLt algorithm, split-K and time to stderr"},
    // ---- testing
    {"VLM_FLASH_CAUSAL_WIDE", Kind::flag, Audience::testing, nullptr, kAutomatic, "vlm",
     "0 or 1: the Hopper d=128 causal forward's mixed 128/160-key steps off or on for every problem"},
    {"VLM_FLASH_DYNAMIC", Kind::flag, Audience::testing, nullptr, kAutomatic, "vlm",
     "0 or 1: the Hopper causal forward's tiles from a global counter off or on for every problem"},
    {"VLM_FLASH_FWD_ROWS64", Kind::flag, Audience::testing, nullptr, kAutomatic, "vlm",
     "0 or 1: the Hopper d=64 causal forward's 64-row tiles off or on for every problem"},
    {"VLM_FLASH_PERSISTENT", Kind::flag, Audience::testing, nullptr, kAutomatic, "vlm",
     "0 or 1: the Hopper kernels launch one CTA per work item, or one CTA per SM walking the items"},
    {"VLM_FLASH_WIDE_KEYS", Kind::flag, Audience::testing, nullptr, kAutomatic, "vlm",
     "0 or 1: the Hopper non-causal forward steps over 128 keys, or always over the wide step"},
    {"VLM_SKIMAGE_DATA", Kind::path, Audience::testing, nullptr, "skimage's data folder, if installed", "tests/data",
     "python3-skimage's sample images for the real-image tests (not a folder: they skip)"},
    {"VLM_TEST_CHECKPOINT_DELAY_MS", Kind::integer, Audience::testing, "0", nullptr, "vlm",
     "milliseconds a checkpoint write and a prune pause at each stage, so tests/train/kill_resume_test.py can kill "
     "vlm train inside them", 0, 60000},
    {"VLM_TEST_LONG_PIPE_MIB", Kind::integer, Audience::testing, "1024", nullptr, "tests/data",
     "MiB the long pipe test streams (e.g. 5000 to cross 4 GiB)", 1, 1 << 20},
};

// "-?(0|[1-9][0-9]*)", at most 9 digits (so the value fits an int before the range check).
bool plain_decimal(const char* s) {
  if (*s == '-') ++s;
  if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] != '\0')) return false;
  int digits = 0;
  for (; *s != '\0'; ++s, ++digits)
    if (*s < '0' || *s > '9' || digits == 9) return false;
  return true;
}

bool is_integer(const Var& v) { return v.kind == Kind::flag || v.kind == Kind::integer; }

const Var& declared_as(std::string_view name, bool integer) {
  const Var& v = declared(name);
  VLM_CHECK(is_integer(v) == integer, "environment variable ", v.name, " is declared as ", kind_name(v),
            ", read as ", integer ? "an integer" : "a string");
  return v;
}

bool has_choice(const char* choices, std::string_view value) {
  std::string_view rest = choices;
  for (;;) {
    const size_t bar = rest.find('|');
    if (rest.substr(0, bar) == value) return true;
    if (bar == std::string_view::npos) return false;
    rest.remove_prefix(bar + 1);
  }
}

std::string default_of(const Var& v) {
  return v.default_text != nullptr ? v.default_text : v.default_value != nullptr ? v.default_value : "";
}

}  // namespace

const std::vector<Var>& registry() { return kRegistry; }

const Var& declared(std::string_view name) {
  for (const Var& v : kRegistry)
    if (name == v.name) return v;
  VLM_FAIL("environment variable ", name, " is not declared (src/core/env.cpp's registry lists the ones vlm reads)");
}

std::optional<int> parse_integer(const Var& var, const char* value) {
  if (value == nullptr || *value == '\0') {
    if (var.default_value == nullptr) return std::nullopt;
    value = var.default_value;
  }
  const bool decimal = plain_decimal(value);
  const long x = decimal ? std::strtol(value, nullptr, 10) : 0;
  VLM_CHECK(decimal && x >= var.lo && x <= var.hi, var.name, " must be an integer in [", var.lo, ", ", var.hi,
            "], not '", value, "'");
  return static_cast<int>(x);
}

std::string parse_text(const Var& var, const char* value) {
  if (value == nullptr || *value == '\0') value = var.default_value != nullptr ? var.default_value : "";
  if (var.kind == Kind::choice)
    VLM_CHECK(has_choice(var.choices, value), var.name, " must be one of ", var.choices, ", not '", value, "'");
  return value;
}

bool flag(std::string_view name) {
  const Var& v = declared_as(name, true);
  VLM_CHECK(v.kind == Kind::flag && v.default_value != nullptr, "environment variable ", v.name,
            " is not a flag with a default (read it with integer_if_set)");
  return *parse_integer(v, std::getenv(v.name)) == 1;
}

int integer(std::string_view name) {
  const Var& v = declared_as(name, true);
  VLM_CHECK(v.default_value != nullptr, "environment variable ", v.name,
            " has no default (read it with integer_if_set)");
  return *parse_integer(v, std::getenv(v.name));
}

std::optional<int> integer_if_set(std::string_view name) {
  const Var& v = declared_as(name, true);
  const char* value = std::getenv(v.name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return parse_integer(v, value);
}

std::string text(std::string_view name) {
  const Var& v = declared_as(name, false);
  return parse_text(v, std::getenv(v.name));
}

const char* audience_name(Audience a) {
  switch (a) {
    case Audience::user: return "user";
    case Audience::benchmarking: return "benchmarking";
    case Audience::debugging: return "debugging";
    case Audience::testing: return "testing";
  }
  return "?";
}

const char* kind_name(const Var& var) {
  switch (var.kind) {
    case Kind::flag: return "0|1";
    case Kind::integer: return "integer";
    case Kind::path: return "path";
    case Kind::text: return "text";
    case Kind::choice: return var.choices;
  }
  return "?";
}

namespace {
constexpr Audience kAudiences[] = {Audience::user, Audience::benchmarking, Audience::debugging, Audience::testing};

std::string values_of(const Var& v) {
  if (v.kind != Kind::integer) return kind_name(v);
  return v.hi >= (1 << 16) ? str("integer >= ", v.lo) : str("integer ", v.lo, "..", v.hi);
}
}  // namespace

std::string help_text() {
  std::string out =
      "Environment variables vlm.cpp reads (docs/env.md has the same list). Unset or empty means the default; a\n"
      "value that does not parse is a fatal error naming the variable. \"read by vlm\": the C++ library, so every\n"
      "binary, test and benchmark; the others are read by the scripts named.\n";
  for (Audience a : kAudiences) {
    out += str("\n", audience_name(a), ":\n");
    for (const Var& v : kRegistry) {
      if (v.audience != a) continue;
      out += str("  ", v.name, "=", values_of(v), "  (default ", default_of(v), "; read by ", v.read_by, ")\n      ",
                 v.meaning, "\n");
    }
  }
  return out;
}

std::string markdown() {
  auto cell = [](std::string s) {  // a Markdown table cell: '|' escaped
    std::string out;
    for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  std::string out =
      "# Environment variables\n\n"
      "<!-- Generated by `vlm --help-env --markdown > docs/env.md` from src/core/env.cpp's registry; edit the "
      "registry, not this file (a test compares the two). -->\n\n"
      "Every environment variable vlm.cpp reads is declared once, in src/core/env.cpp, and read through its typed "
      "accessors; a test fails when code reads an undeclared `VLM_*` variable. `vlm --help-env` prints this list. "
      "Unset or empty means the default; a value that does not parse is a fatal error naming the variable. Read by "
      "*vlm*: the C++ library, so every binary, test and benchmark; the others are read by the scripts named.\n\n"
      "Training runs are configured by their run file (TOML and `--set`), not the environment: e.g. "
      "`train.deterministic` chooses bit-identical CUDA results (the deterministic attention backward and cuBLASLt's "
      "heuristic GEMM algorithms) over the fastest kernels.\n";
  for (Audience a : kAudiences) {
    out += str("\n## ", audience_name(a),
               "\n\n| variable | values | default | read by | meaning |\n|---|---|---|---|---|\n");
    for (const Var& v : kRegistry) {
      if (v.audience != a) continue;
      out += str("| `", v.name, "` | ", cell(values_of(v)), " | ", cell(default_of(v)), " | ", cell(v.read_by), " | ",
                 cell(v.meaning), " |\n");
    }
  }
  return out;
}

}  // namespace vlm::env

namespace vlm {

bool EnvSwitch::on() {
  int v = state_.load();
  if (v < 0) {
    v = env::flag(name_) ? 1 : 0;
    state_.store(v);
  }
  return v == 1;
}

std::string vlm_environment() {
  std::vector<std::pair<std::string, bool>> vars;  // "NAME=value", declared
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "VLM_", 4) != 0) continue;
    const std::string entry = *e, name = entry.substr(0, entry.find('='));
    const bool known = std::any_of(env::registry().begin(), env::registry().end(),
                                   [&](const env::Var& v) { return name == v.name; });
    vars.emplace_back(entry, known);
  }
  std::sort(vars.begin(), vars.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second : a.first < b.first;
  });
  std::string out;
  for (const auto& [entry, known] : vars) out += (out.empty() ? "" : " ") + entry + (known ? "" : "(undeclared)");
  return out;
}

}  // namespace vlm
