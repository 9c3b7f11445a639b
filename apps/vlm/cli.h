// Command-line flags declared once: the same table parses argv and prints --help.
//   Flags f("vlm train", "Train a VLM from a run file.");
//   f.add_string("--config", &path, "run file (TOML)");
//   f.add_multi("--set", &overrides, "override one option: key=value");
//   if (auto s = f.parse(argc, argv); !s.ok()) ...
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace vlm::cli {

class Flags {
 public:
  Flags(std::string usage, std::string summary) : usage_(std::move(usage)), summary_(std::move(summary)) {}

  void add_string(const std::string& name, std::string* target, const std::string& help);
  void add_int(const std::string& name, int64_t* target, const std::string& help);
  void add_bool(const std::string& name, bool* target, const std::string& help);  // a switch, no value
  void add_multi(const std::string& name, std::vector<std::string>* target, const std::string& help);
  // Marks a flag as required: parse() fails naming it when absent.
  void require(const std::string& name);

  // Parses argv[first..argc). "--name value" and "--name=value" both work. Returns invalid_argument naming the
  // flag on errors. Sets help_requested() on --help / -h.
  Status parse(int argc, char** argv, int first);
  bool help_requested() const { return help_; }
  std::string help() const;
  std::vector<std::string> positional() const { return positional_; }

 private:
  struct Flag {
    std::string name, help, kind, default_text;
    std::function<Status(const std::string&)> set;
    bool required = false, seen = false;
  };
  Flag* find(const std::string& name);
  std::string usage_, summary_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

// Parses the flags of a command: prints help (plus `extra_help`) on --help, an error on bad flags. Returns -1 when
// the command should go on, else the exit code to return (0 after help, 2 after a usage error).
int parse_command_flags(Flags& flags, int argc, char** argv, int first, const std::string& extra_help = "");

}  // namespace vlm::cli
