// The training loop: data -> forward/backward (with gradient accumulation) -> clip -> AdamW -> metrics, periodic
// eval and atomic checkpoints. A run resumed from its latest checkpoint continues exactly (same losses, bit for
// bit, on the CPU with the same thread count) because weights, optimizer moments, the step count and the data
// loader's position are all part of the checkpoint and the data order depends only on the seed.
// Batches are read one micro-batch ahead and copied to the device while the current one computes (BatchUploader,
// train/device_batch.h); the checkpointed loader position is the one after the last batch trained on. Nothing in a
// step waits for the device: step n's loss and grad norm are read (StepLoss, GradNorm) once step n + 1 is queued, and
// before any checkpoint, eval or the end, so a non-finite loss still stops the run before its step is saved.
// A step whose batches hold no target token (every sample skipped) is not an optimizer step; a run in which more than
// data.max_skip_fraction of the last data.skip_window samples were skipped stops with an error naming the main reason
// (train/skip_window.h). --resume takes the newest checkpoint that verifies, setting damaged newer ones aside.
#pragma once

#include <string>
#include <vector>

#include "eval/eval_runner.h"
#include "train/train_config.h"

namespace vlm {

struct TrainerOptions {
  RunConfig config;
  std::string resolved_toml;      // written to run_dir/config.toml
  std::string run_dir;
  bool resume = false;            // continue from the newest checkpoint in run_dir/checkpoints
  std::vector<std::string> argv;  // recorded in run.json
  int64_t stop_after_step = -1;   // >= 0: return after this step as if interrupted (tests)
  bool quiet = false;             // no console progress
};

struct TrainResult {
  int64_t start_step = 0;
  int64_t final_step = 0;
  double final_loss = 0;
  double wall_seconds = 0;
  bool has_eval = false;
  EvalResult eval;
};

Expected<TrainResult> run_training(const TrainerOptions& options);

// The loader options for `shard_spec` under run config `c`: build_loader_options over its [data] and [filter]
// sections with the model's input shape and train.seed (eval: one pass, fixed order).
Expected<VlmDataOptions> make_data_options(const RunConfig& c, const std::string& shard_spec, bool for_eval);

// The eval options of run config `c` ([eval]; the tasks resolved against data.task, an unknown one an error).
Expected<EvalOptions> make_eval_options(const RunConfig& c);

}  // namespace vlm
