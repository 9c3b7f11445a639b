// `vlm bench <benchmark>`: benchmarks that measure the peer in the same run and print the ratio.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/comm/bench_comm.h"
#include "bench/data/bench_data.h"
#include "bench/decode/bench_decode.h"
#include "bench/train/bench_train.h"
#include "commands.h"

#ifdef VLM_HAVE_CUDA
#include "bench/attention/bench_attention.h"
#endif

namespace vlm::cli {
namespace {

// Runs a benchmark's main on argv[first..) with "vlm bench <name>" as its argv[0] (what its --help shows).
int run_bench(int (*main)(int, char**), const char* name, int argc, char** argv, int first) {
  std::string prog = std::string("vlm bench ") + name;
  std::vector<char*> args{prog.data()};
  for (int i = first; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  return main(static_cast<int>(args.size()) - 1, args.data());
}

int bench_attention(int argc, char** argv, int first) {
#ifdef VLM_HAVE_CUDA
  return run_bench(vlm::bench::bench_attention_main, "attention", argc, argv, first);
#else
  for (int i = first; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::printf("vlm bench attention needs a CUDA build (cmake --preset cuda)\n");
      return 0;
    }
  std::fprintf(stderr, "vlm bench attention needs a CUDA build (cmake --preset cuda)\n");
  return 1;
#endif
}

int bench_comm(int argc, char** argv, int first) {
  return run_bench(vlm::bench::bench_comm_main, "comm", argc, argv, first);
}

int bench_data(int argc, char** argv, int first) {
  return run_bench(vlm::bench::bench_data_main, "data", argc, argv, first);
}

int bench_decode(int argc, char** argv, int first) {
  return run_bench(vlm::bench::bench_decode_main, "decode", argc, argv, first);
}

int bench_train(int argc, char** argv, int first) {
  return run_bench(vlm::bench::bench_train_main, "train", argc, argv, first);
}

}  // namespace

const std::vector<Command>& benchmarks() {
  static const std::vector<Command> table = {
      {"attention", "our FlashAttention fwd/bwd TFLOP/s vs PyTorch SDPA (cuDNN, FlashAttention-2); CUDA build",
       bench_attention},
      {"comm", "all_gather / reduce_scatter / all_reduce bus bandwidth over NCCL (GPUs) or MPI (CPUs) vs "
               "torch.distributed",
       bench_comm},
      {"decode", "the inference engine: tok/s, TTFT, ITL at batch 1/32/128 (text and VLM shapes) vs PyTorch peers",
       bench_decode},
      {"data", "decode + resize (+ normalize, + tokenize) images/s per core vs Pillow on JPEG shards", bench_data},
      {"train", "one training step of the nanoVLM-222M shape vs PyTorch: samples/s, MFU, memory; CUDA device",
       bench_train},
  };
  return table;
}

int cmd_bench(int argc, char** argv, int first) {
  return dispatch("vlm bench", "benchmark", benchmarks(), argc, argv, first);
}

}  // namespace vlm::cli
