// The environment variables vlm.cpp reads, declared once (env.cpp's registry: name, kind, default, audience, who reads
// it, one line of meaning) and read only through the typed accessors below, so every variable parses by the same
// strict rules, a bad value is a fatal error naming the variable, and `vlm --help-env` and docs/env.md list them all.
// Variables read by scripts (scripts/build.sh, python/vlm_flash.py, ...) are declared here too, so the list is
// complete; a test scans the sources for reads of undeclared VLM_* names (tests/apps/check_env.py).
// C++17: CUDA sources include it.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vlm::env {

// Who sets a variable: anyone running vlm.cpp, someone comparing performance, someone chasing a bug, test runs.
enum class Audience { user, benchmarking, debugging, testing };

// What a variable holds. flag: 0 or 1; integer: a plain decimal in [lo, hi]; path and text: any string; choice: one
// of `choices` ('|'-separated).
enum class Kind { flag, integer, path, text, choice };

struct Var {
  const char* name;
  Kind kind;
  Audience audience;
  // The value when the variable is unset or empty, spelled as it would be set ("0", "info"); nullptr when there is
  // none: the reader decides (then default_text says what it does, e.g. "automatic").
  const char* default_value;
  const char* default_text;  // the default as documented; nullptr: default_value
  const char* read_by;       // "vlm" (the C++ library: every binary, test and benchmark) or the files that read it
  const char* meaning;       // one line
  int lo = 0, hi = 1;        // integer (and flag: 0, 1)
  const char* choices = nullptr;
};

// Every declared variable, grouped by audience, by name within each group.
const std::vector<Var>& registry();
// The declaration of `name`; aborts naming it when it is not declared.
const Var& declared(std::string_view name);

// Typed accessors. Each reads the environment when called (callers that read on a hot path cache the result); an
// undeclared name, a kind other than the declaration's, or a bad value aborts with a message naming the variable.
// Integers and flags accept only plain decimals ("0", "12", "-3"; not "+1", " 1", "01" or "1x") in [lo, hi].
bool flag(std::string_view name);                         // flag with a default
int integer(std::string_view name);                       // flag or integer with a default
std::optional<int> integer_if_set(std::string_view name);  // flag or integer; nullopt when unset or empty
std::string text(std::string_view name);                  // path, text or choice; the default ("" when none)

// The same rules for one Var, given its value (nullptr: unset), whether declared or not: what the accessors run, and
// what tests of the parsing rules call.
std::optional<int> parse_integer(const Var& var, const char* value);
std::string parse_text(const Var& var, const char* value);

// `vlm --help-env`: every variable with its default, audience and meaning, grouped by audience.
std::string help_text();
// docs/env.md, the same table in Markdown (`vlm --help-env --markdown > docs/env.md`).
std::string markdown();

const char* audience_name(Audience a);
const char* kind_name(const Var& var);  // "0|1", "integer", "path", "text", or the choices

}  // namespace vlm::env

namespace vlm {

// An on/off setting that code may set, and that until then reads the declared flag `name` on the first on(): e.g.
// ops::set_attention_flash over VLM_ATTENTION_FLASH. Thread-safe; meant for namespace-scope objects.
class EnvSwitch {
 public:
  constexpr explicit EnvSwitch(const char* name) : name_(name) {}
  bool on();
  void set(bool on) { state_.store(on ? 1 : 0); }

 private:
  const char* name_;
  std::atomic<int> state_{-1};  // -1: not decided yet
};

// The declared variables that are set, as "NAME=value" joined by single spaces in name order, then any other VLM_*
// variable that is set, as "NAME=value(undeclared)" (a setting vlm.cpp does not have, e.g. one since removed): what
// benchmarks print in their header, so a run's log says which settings it ran under.
std::string vlm_environment();

}  // namespace vlm
