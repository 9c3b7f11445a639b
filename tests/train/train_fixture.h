// A tiny end-to-end training set-up for tests: a few hundred 16 px shapes samples, a BPE tokenizer trained on
// their text, and a run config of a model small enough to train a few steps in well under a second.
#pragma once

#include <string>

#include "train/train_config.h"

namespace vlm::testing {

// Writes shards + tokenizer.json under `dir` (once per process per dir) and returns a run config that uses them.
RunConfig tiny_run_config(const std::string& dir);

}  // namespace vlm::testing
