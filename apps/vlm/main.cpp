// vlm: the one command-line entry point. `vlm --help` lists the commands (from the dispatch table below and the
// tables of `vlm data` and `vlm bench`), `vlm <command> --help` each command's flags, `vlm --help-env` the
// environment variables vlm.cpp reads (core/env.h's registry).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "commands.h"
#include "core/env.h"

namespace {

using vlm::cli::Command;

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"train", "train a VLM from a TOML run file (--resume continues a run exactly)", vlm::cli::cmd_train},
      {"eval", "evaluate a checkpoint on held-out shards (VQA accuracy, caption CIDEr-D/BLEU/ROUGE-L, retrieval)", vlm::cli::cmd_eval},
      {"forward", "run a model on a transformers-style batch (input_ids, pixel_values) and write its logits",
       vlm::cli::cmd_forward},
      {"convert", "convert model folders: Hugging Face in (SmolVLM, nanoVLM, Llama, Qwen2, SigLIP) and out",
       vlm::cli::cmd_convert},
      {"generate", "generate with a trained model (paged-KV engine; --prompt/--image or a JSONL of requests)",
       vlm::cli::cmd_generate},
      {"serve", "serve a model over the OpenAI API (chat with images, streaming, metrics)", vlm::cli::cmd_serve},
      {"data", "dataset tools", vlm::cli::cmd_data, &vlm::cli::data_tools()},
      {"launch", "run N ranks of a command on this node (torchrun-style), e.g. vlm launch --nproc 8 -- vlm train ...",
       vlm::cli::cmd_launch},
      {"bench", "benchmarks against the peers", vlm::cli::cmd_bench, &vlm::cli::benchmarks()},
      {"report", "one self-contained HTML page comparing runs: curves, memory, config diff, eval examples",
       vlm::cli::cmd_report},
  };
  return table;
}

void print_usage(FILE* out) {
  std::fprintf(out,
               "vlm.cpp: train, evaluate and generate with vision-language models, build and clean their datasets, "
               "benchmark against peers\n\nusage: vlm <command> [flags]\n\ncommands:\n%s\n"
               "`vlm <command> --help` lists a command's flags; `vlm --help-env` the environment variables vlm.cpp "
               "reads\n(`vlm --help-env --markdown` writes docs/env.md).\n",
               vlm::cli::command_lines(commands(), "").c_str());
}

bool is(const char* arg, const char* name) { return std::strcmp(arg, name) == 0; }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || is(argv[1], "--help") || is(argv[1], "-h") || is(argv[1], "help")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (is(argv[1], "--help-env")) {
    if (argc == 2 || (argc == 3 && is(argv[2], "--markdown"))) {
      std::printf("%s", (argc == 2 ? vlm::env::help_text() : vlm::env::markdown()).c_str());
      return 0;
    }
    std::fprintf(stderr, "usage: vlm --help-env [--markdown]\n");
    return 2;
  }
  for (const Command& c : commands())
    if (is(argv[1], c.name)) return c.run(argc, argv, 2);
  std::fprintf(stderr, "vlm: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return 2;
}
