// The run file: model, data, filter, train and eval sections as typed structs with defaults (data and filter are the
// loader's: data/loader/data_config.h). One declaration per option (add_run_options) drives TOML parsing, --set,
// --help and the resolved config.toml in the run directory.
#pragma once

#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/options.h"
#include "data/loader/data_config.h"
#include "kernels/ops.h"
#include "model/model_config.h"

namespace vlm {

struct OptimConfig {
  int64_t steps = 1000;
  int batch_size = 32;                    // samples per micro-batch
  int grad_accum = 1;                     // micro-batches per optimizer step
  ops::AdamWSettings adamw;               // train.lr (the peak), beta1, beta2, eps, weight_decay, grad_clip
  float lr_scale_vision = 1.f;            // per-part learning-rate multipliers
  float lr_scale_projector = 1.f;
  float lr_scale_text = 1.f;
  int64_t warmup_steps = 50;
  float min_lr_ratio = 0.1f;              // cosine decays to lr * min_lr_ratio
  std::vector<std::string> freeze;        // parts not trained: vision, projector, text
  int64_t seed = 1234;
  std::string device = "cpu";
  std::string precision = "fp32";         // fp32 | bf16 (bf16 weights/activations, fp32 master + moments; cuda only)
  std::string recompute = "none";         // none | blocks (transformer blocks keep their input, redo the forward)
  bool deterministic = false;             // cuda: bit-identical results run to run (ops::set_deterministic)
  int threads = 0;                        // CPU threads (0 = all cores)
  int64_t log_every = 1;
  double peak_tflops = 0;                 // the device's peak, for the mfu metric (0 = from the GPU's name)
  int64_t ckpt_every = 200;               // 0 disables periodic checkpoints (a final one is always written)
  int keep_last = 3;
  int data_streams = 0;                   // data streams (0: the first launch's world size); train/data_streams.h
  std::string fsdp = "no_shard";  // no_shard (DDP) | shard_grad_op (ZeRO-2) | full_shard (ZeRO-3) | hybrid_shard
  bool fsdp_prefetch = true;              // gather the next unit's weights before this unit computes
  std::string fsdp_reduce_dtype = "fp32"; // fp32 | bf16 gradients on the wire (accumulated in fp32)
  int fsdp_shard_group_size = 0;          // hybrid_shard: ranks a shard group; 0 = the ranks of a node
  std::string fsdp_allgather_dtype = "compute";  // compute (the compute dtype's copies) | fp8_e4m3
  std::string init_from;                  // weights to start from: a model folder (HF or vlm) or a safetensors file
  std::vector<std::string> init_allow_missing;  // parts or tensor names init_from may lack (strict otherwise)
};

struct EvalConfig {
  int64_t every = 0;                      // steps between evals during training (0 = only at the end)
  int samples = 200;                      // held-out images per eval
  int max_new_tokens = 12;                // longest generated answer (vqa)
  int caption_max_new_tokens = 32;        // longest generated caption
  int batch_size = 64;
  std::vector<std::string> tasks;         // vqa, caption, retrieval; empty = what data.task trains
  int examples = 20;                      // examples kept per task in eval/*.json
  int retrieval_samples = 32;             // images ranked against each other (n^2 pairs scored)
};

struct RunConfig {
  ModelConfig model;
  DataConfig data;
  DataFilterConfig filter;
  OptimConfig train;
  EvalConfig eval;
};

void add_run_options(OptionSet& options, RunConfig& config);
// Loads the run file (if any), applies the model preset first, then the file and the --set overrides, validates.
// `preset_from_file` handles "model.preset" so the preset's values sit below the file's own values.
Expected<RunConfig> load_run_config(const std::string& path, const std::vector<std::string>& overrides,
                                    std::string* resolved_toml = nullptr);
// The model's compute dtype for train.precision on train.device: f32 for "fp32", bf16 for "bf16" on cuda; an error
// naming both options otherwise (the CPU backend computes in fp32 only).
Expected<DType> training_compute_dtype(const OptimConfig& train);

}  // namespace vlm
