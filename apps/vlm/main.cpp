// vlm: the one command-line entry point. `vlm <command> --help` describes each command.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int, char**, int);
};

const Command kCommands[] = {
    {"train", "train a VLM from a TOML run file (--resume continues a run exactly)", vlm::cli::cmd_train},
    {"eval", "evaluate a checkpoint on held-out shards (VQA accuracy, caption exact match)", vlm::cli::cmd_eval},
    {"data", "dataset tools: synth, tokenizer-train", vlm::cli::cmd_data},
    {"bench", "benchmarks against the peers: attention (FlashAttention vs PyTorch SDPA), data (decode + resize vs Pillow)", vlm::cli::cmd_bench},
};

void print_usage() {
  std::printf("vlm.cpp — train and serve vision-language models\n\nusage: vlm <command> [flags]\n\ncommands:\n");
  for (const auto& c : kCommands) std::printf("  %-8s %s\n", c.name, c.summary);
  std::printf("\n`vlm <command> --help` lists a command's flags.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : kCommands)
    if (!std::strcmp(argv[1], c.name)) return c.run(argc, argv, 2);
  std::fprintf(stderr, "vlm: unknown command '%s'\n\n", argv[1]);
  print_usage();
  return 2;
}
