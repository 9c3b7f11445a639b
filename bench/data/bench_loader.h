// `vlm bench data --loader`: the real training loader (VlmBatchLoader: shard reading, data plan, decode thread pool,
// prefetching, tokenizing, packing) at the nanoVLM-222M training shape (224 px center crop, normalized, caption task,
// 49 image + up to 128 text tokens, batch 64) over img2dataset-style JPEG shards, drained for a fixed number of
// batches per decode-thread count. Prints samples/s beside a training step's consumption (default 1026 samples/s,
// a torch.compile nanoVLM-222M step on an H200: dev/log/benchmarks.md), the loader's own timing (consumer wait =
// trainer stall, read / decode / pack per batch, prefetch idle) and, optionally, the stall when the consumer is paced
// at a multiple of that rate.
#pragma once

#include <string>
#include <vector>

#include "bench/data/bench_shards.h"

namespace vlm::bench {

struct LoaderBenchOptions {
  std::vector<std::string> shards;  // empty: generate `n_shards` shards of `gen` (seeds 0..n_shards-1)
  BenchShardOptions gen;
  int n_shards = 4;
  std::string out_dir;              // where generated shards go
  bool regenerate = false;
  std::string tokenizer;            // tokenizer.json; empty: a byte-level BPE trained on the shards' captions
  std::vector<int> decode_threads{1, 2};  // one run per entry (data.decode_threads: workers besides the builder)
  int batches = 30;                 // timed batches per run, after one warm-up batch
  int batch_size = 64, image_size = 224, image_tokens = 49, text_tokens = 128, prefetch = 2;
  std::string resize_mode = "center_crop", filter = "bicubic";
  double consume = 1026.0;          // samples/s a training step consumes
  bool consume_given = false;       // false: the default (the torch.compile step), said so in the output
  double pace = 2.0;                // > 0: also drain paced at pace * consume samples/s and report the stall
  std::string json_out;
};

// Returns a process exit code: 0 = ok, 1 = failure (bad shards, a loader error, a skipped sample).
int run_loader_bench(const LoaderBenchOptions& options);

}  // namespace vlm::bench
