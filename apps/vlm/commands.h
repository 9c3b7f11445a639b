// The commands of `vlm`. Each takes the full argv and the index of its first own argument and returns the process
// exit code (0 ok, 1 failure, 2 usage error). Commands with subcommands (`vlm data <tool>`, `vlm bench <benchmark>`)
// dispatch through a table that also prints their help, so `vlm --help` and `vlm data --help` list exactly what runs.
#pragma once

#include <string>
#include <vector>

namespace vlm::cli {

struct Command {
  const char* name;
  const char* summary;  // one line
  int (*run)(int argc, char** argv, int first);
  const std::vector<Command>* subcommands = nullptr;  // what `run` dispatches to, for the help of the level above
};

// Runs the entry of `table` that argv[first] names. `usage` names the level ("vlm data"), `noun` its entries
// ("tool"). With no argument (exit 2) or --help / -h (exit 0) prints the table; an unknown name is a usage error.
int dispatch(const char* usage, const char* noun, const std::vector<Command>& table, int argc, char** argv, int first);
// The table's entries as help lines, "  <prefix><name>  <summary>" with the names padded to one width; an entry with
// subcommands gives one "<name> <subcommand>" line for each.
std::string command_lines(const std::vector<Command>& table, const std::string& prefix);

int cmd_train(int argc, char** argv, int first);
int cmd_eval(int argc, char** argv, int first);
int cmd_data(int argc, char** argv, int first);
int cmd_bench(int argc, char** argv, int first);
int cmd_report(int argc, char** argv, int first);
int cmd_forward(int argc, char** argv, int first);
int cmd_convert(int argc, char** argv, int first);
int cmd_generate(int argc, char** argv, int first);
int cmd_launch(int argc, char** argv, int first);
int cmd_serve(int argc, char** argv, int first);

// `vlm data`'s tools and `vlm bench`'s benchmarks.
const std::vector<Command>& data_tools();
const std::vector<Command>& benchmarks();

// `vlm data` tools living in their own files.
int data_build(int argc, char** argv, int first);
int data_inspect(int argc, char** argv, int first);
int data_dedup(int argc, char** argv, int first);
int data_filter(int argc, char** argv, int first);

}  // namespace vlm::cli
