// Flags and the command tables' dispatch.
#include "cli.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "commands.h"

namespace vlm::cli {

Flags::Flag* Flags::find(const std::string& name) {
  for (auto& f : flags_)
    if (f.name == name) return &f;
  return nullptr;
}

void Flags::add_string(const std::string& name, std::string* target, const std::string& help) {
  flags_.push_back({name, help, "string", *target, [target](const std::string& v) {
                      *target = v;
                      return Status();
                    }});
}

void Flags::add_int(const std::string& name, int64_t* target, const std::string& help) {
  flags_.push_back({name, help, "int", std::to_string(*target), [target, name](const std::string& v) {
                      char* end = nullptr;
                      long long x = std::strtoll(v.c_str(), &end, 10);
                      if (v.empty() || *end) return invalid_argument(name + ": '" + v + "' is not an integer");
                      *target = x;
                      return Status();
                    }});
}

void Flags::add_bool(const std::string& name, bool* target, const std::string& help) {
  flags_.push_back({name, help, "switch", *target ? "on" : "off", [target](const std::string&) {
                      *target = true;
                      return Status();
                    }});
}

void Flags::add_multi(const std::string& name, std::vector<std::string>* target, const std::string& help) {
  flags_.push_back({name, help, "repeatable", "", [target](const std::string& v) {
                      target->push_back(v);
                      return Status();
                    }});
}

void Flags::require(const std::string& name) {
  if (Flag* f = find(name)) f->required = true;
}

Status Flags::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      return Status();
    }
    if (arg.rfind("--", 0) != 0) {
      positional_.push_back(arg);
      continue;
    }
    std::string value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    Flag* f = find(arg);
    if (!f) return invalid_argument("unknown flag " + arg + " (see --help)");
    if (f->kind != "switch" && !has_value) {
      if (i + 1 >= argc) return invalid_argument(arg + " needs a value");
      value = argv[++i];
    }
    VLM_RETURN_IF_ERROR(f->set(value));
    f->seen = true;
  }
  for (const auto& f : flags_)
    if (f.required && !f.seen) return invalid_argument(f.name + " is required (see --help)");
  return Status();
}

std::string Flags::help() const {
  std::string out = "usage: " + usage_ + "\n\n" + summary_ + "\n\nflags:\n";
  size_t width = 0;
  for (const auto& f : flags_) width = std::max(width, f.name.size());
  for (const auto& f : flags_) {
    out += "  " + f.name + std::string(width + 2 - f.name.size(), ' ') + f.help;
    if (f.required) out += " (required)";
    else if (!f.default_text.empty()) out += " (default " + f.default_text + ")";
    out += "\n";
  }
  return out;
}

int parse_command_flags(Flags& flags, int argc, char** argv, int first, const std::string& extra_help) {
  if (Status s = flags.parse(argc, argv, first); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s%s", flags.help().c_str(), extra_help.c_str());
    return 0;
  }
  return -1;
}

namespace {
void collect(const std::vector<Command>& table, const std::string& prefix,
             std::vector<std::pair<std::string, const char*>>& out) {
  for (const Command& c : table) {
    if (c.subcommands != nullptr) collect(*c.subcommands, prefix + c.name + " ", out);
    else out.emplace_back(prefix + c.name, c.summary);
  }
}
}  // namespace

std::string command_lines(const std::vector<Command>& table, const std::string& prefix) {
  std::vector<std::pair<std::string, const char*>> lines;
  collect(table, prefix, lines);
  size_t width = 0;
  for (const auto& l : lines) width = std::max(width, l.first.size());
  std::string out;
  for (const auto& [name, summary] : lines)
    out += "  " + name + std::string(width - name.size() + 2, ' ') + summary + "\n";
  return out;
}

int dispatch(const char* usage, const char* noun, const std::vector<Command>& table, int argc, char** argv,
             int first) {
  const std::string help = str("usage: ", usage, " <", noun, "> [flags]\n\n", noun, "s:\n", command_lines(table, ""),
                               "\n`", usage, " <", noun, "> --help` lists its flags.\n");
  if (first >= argc || !std::strcmp(argv[first], "--help") || !std::strcmp(argv[first], "-h")) {
    std::printf("%s", help.c_str());
    return first >= argc ? 2 : 0;
  }
  for (const Command& c : table)
    if (!std::strcmp(argv[first], c.name)) return c.run(argc, argv, first + 1);
  std::fprintf(stderr, "%s: unknown %s '%s'\n\n%s", usage, noun, argv[first], help.c_str());
  return 2;
}

}  // namespace vlm::cli
