// The subcommands of `vlm`. Each takes the full argv and the index of its first own argument and returns the
// process exit code (0 ok, 1 failure, 2 usage error).
#pragma once

namespace vlm::cli {

int cmd_train(int argc, char** argv, int first);
int cmd_eval(int argc, char** argv, int first);
int cmd_data(int argc, char** argv, int first);
int cmd_bench(int argc, char** argv, int first);

// `vlm data` tools living in their own files.
int data_build(int argc, char** argv, int first);
int data_inspect(int argc, char** argv, int first);
int data_dedup(int argc, char** argv, int first);
int data_filter(int argc, char** argv, int first);

}  // namespace vlm::cli
