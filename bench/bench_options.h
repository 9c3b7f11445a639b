// The flag table every benchmark parses its command line with: one OptionSpec per flag (a value setter, or a flag
// action), --help generated from the same table, errors naming the benchmark and the flag.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace vlm::bench {

template <class Options>
struct OptionSpec {
  const char* name;
  const char* help;
  std::function<bool(Options&, const std::string&)> set;  // null for flags
  std::function<void(Options&)> flag;
};

template <class Options>
void print_bench_help(const char* prog, const std::vector<OptionSpec<Options>>& specs, int name_width) {
  std::printf("usage: %s [options]\n", prog);
  for (const auto& s : specs) std::printf("  %-*s %s%s\n", name_width, s.name, s.set ? "VALUE  " : "", s.help);
}

// Parses argv[1..] into `o`. Returns -1 to go on, or the exit code: 0 after --help, 2 for an unknown flag or a bad
// or missing value (the message names `bench` and the flag).
template <class Options>
int parse_bench_options(const char* bench, int argc, char** argv, const std::vector<OptionSpec<Options>>& specs,
                        int help_width, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      print_bench_help(argv[0], specs, help_width);
      return 0;
    }
    const OptionSpec<Options>* spec = nullptr;
    for (const auto& s : specs)
      if (a == s.name) spec = &s;
    if (!spec) {
      std::fprintf(stderr, "%s: unknown option %s (see --help)\n", bench, a.c_str());
      return 2;
    }
    if (spec->flag) {
      spec->flag(o);
      continue;
    }
    if (i + 1 >= argc || !spec->set(o, argv[i + 1])) {
      std::fprintf(stderr, "%s: bad or missing value for %s\n", bench, a.c_str());
      return 2;
    }
    ++i;
  }
  return -1;
}

}  // namespace vlm::bench
