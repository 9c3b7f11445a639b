// `vlm bench <what>`: benchmarks that measure the peer in the same run and print the ratio.
#include <cstdio>
#include <cstring>
#include <string>

#include "bench/data/bench_data.h"
#include "bench/train/bench_train.h"
#include "commands.h"

#ifdef VLM_HAVE_CUDA
#include "bench/attention/bench_attention.h"
#endif

namespace vlm::cli {

int cmd_bench(int argc, char** argv, int first) {
  const char* usage =
      "usage: vlm bench <benchmark> [flags]\n\nbenchmarks:\n"
      "  attention   our FlashAttention fwd/bwd TFLOP/s vs PyTorch SDPA (cuDNN, FlashAttention-2); CUDA build\n"
      "  data        decode + resize (+ normalize, + tokenize) images/s per core vs Pillow on JPEG shards\n"
      "  train       one training step of the nanoVLM-222M shape: samples/s, TFLOP/s, MFU, memory; CUDA device\n";
  if (first >= argc || !std::strcmp(argv[first], "--help") || !std::strcmp(argv[first], "-h")) {
    std::printf("%s", usage);
    return first >= argc ? 2 : 0;
  }
  const std::string what = argv[first];
  if (what == "attention") {
#ifdef VLM_HAVE_CUDA
    return vlm::bench::bench_attention_main(argc - first, argv + first);
#else
    std::fprintf(stderr, "vlm bench attention needs a CUDA build (cmake --preset cuda)\n");
    return 1;
#endif
  }
  if (what == "data") return vlm::bench::bench_data_main(argc - first, argv + first);
  if (what == "train") return vlm::bench::bench_train_main(argc - first, argv + first);
  std::fprintf(stderr, "vlm bench: unknown benchmark '%s'\n\n%s", what.c_str(), usage);
  return 2;
}

}  // namespace vlm::cli
