// A tiny end-to-end training set-up for tests: a few hundred 16 px shapes samples, a BPE tokenizer trained on
// their text, and a run config of a model small enough to train a few steps in well under a second.
#pragma once

#include <string>
#include <vector>

#include "core/device.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace vlm::testing {

// Writes shards + tokenizer.json under `dir` (once per process per dir) and returns a run config that uses them.
RunConfig tiny_run_config(const std::string& dir);

// tiny_run_config fine-tuning a SmolVLM-shaped Hugging Face folder (written under `dir`): train.init_from is an
// Idefics3 config.json with random weights and an Idefics3 preprocessor_config.json (longest edge 32, tiles of
// 16 px: a 16 px shapes image becomes 2 x 2 tiles plus the global image), data.tokenizer the fixture's BPE with
// SmolVLM's layout tokens; no held-out shards.
RunConfig tiny_idefics3_run_config(const std::string& dir);

// A trainer's options for a test run: `config` trained into `run_dir`, quietly.
TrainerOptions trainer_options(const RunConfig& config, const std::string& run_dir);

// The train records' losses of run_dir/metrics.jsonl, in order. must_exist: a missing or unreadable file fails the
// test (without it, that gives no losses).
std::vector<double> train_losses(const std::string& run_dir, bool must_exist = true);

// The training loop as it was before the trainer's batch pipeline, for comparisons: every micro-batch of a step read
// first, each copied to `device` synchronously (to_model_inputs) right before its forward/backward, then AdamW.
// Returns the loss of every step. Honours the train.* options the trainer's loss depends on (not freezing or
// per-part learning rates), train.precision and train.recompute.
std::vector<double> plain_loop_losses(const RunConfig& config, Device device);

}  // namespace vlm::testing
