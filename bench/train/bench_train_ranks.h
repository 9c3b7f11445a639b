// `vlm bench train` over the ranks of a launch (mpirun / srun / vlm launch / torchrun-style; a world of one too):
// every rank trains its own synthetic batch of --batch samples (weak scaling: the work per rank stays fixed) with the
// model shared through FSDP (train/fsdp.h) under --fsdp, over NCCL on GPUs or MPI on CPUs. Rank 0 prints each rank's
// and the total samples/s and tokens/s (tokens: every position of the packed sequences, image and text), the weak
// scaling efficiency against a single-rank figure (--baseline-json: total / (ranks x the baseline's samples/s)), and
// each rank's memory: FSDP's accounting of the buffers it holds beside the formula (memory.json's), and the device
// allocator's peak over one step.
#pragma once

#include <string>

namespace vlm::bench {

struct TrainRanksOptions {
  std::string preset = "nanovlm-222m";
  std::string device = "cuda";  // or "cpu"
  int batch = 64, text_tokens = 128, steps = 20, warmup = 5;
  std::string precision = "bf16";  // fp32 on the CPU
  float grad_clip = 1.f;
  std::string recompute = "none";
  std::string fsdp = "full_shard";
  std::string reduce_dtype = "f32";
  std::string baseline_json, peer_json, json_out;
};

// Runs the benchmark on this launch's ranks. Returns the process exit code.
int bench_train_ranks(const TrainRanksOptions& o);

}  // namespace vlm::bench
