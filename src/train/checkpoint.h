// Checkpoint folders: run_dir/checkpoints/step_00000200/{model.safetensors, optimizer.safetensors,
// trainer_state.json, manifest.json}, or for sharded training {fsdp_index.json, model_shard_RRRRR.safetensors,
// optimizer_shard_RRRRR.safetensors per rank, trainer_state.json, manifest.json} (train/sharded_checkpoint.h). A checkpoint is written into "step_XXXXXXXX.tmp" and renamed into place only
// when complete (manifest.json, written last, records every file's size), then the `latest` file is replaced
// atomically and all but the newest `keep_last` are pruned: each is first renamed to "step_XXXXXXXX.pruning", out of
// the checkpoint namespace, then deleted, so a kill mid-delete never leaves a half-deleted folder that looks like a
// checkpoint. A crash at any moment leaves either the old or the new checkpoint, never a torn one; the leftovers
// (".tmp", ".pruning") are removed by clean_leftovers() on the next start.
// A checkpoint damaged afterwards (a file missing or truncated, bad JSON, a size that differs from the manifest) is
// found by verify(); resuming takes the newest valid one and moves the damaged newer ones aside (".damaged"), so
// that pruning never counts them and never deletes the valid one in their favour.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace vlm {

struct CheckpointInfo {
  int64_t step = 0;
  std::string path;
};

// A checkpoint verify() rejected, and why.
struct DamagedCheckpoint {
  CheckpointInfo info;
  Status problem;
};

class CheckpointManager {
 public:
  CheckpointManager(std::string dir, int keep_last);

  // Writes the checkpoint of `step`: `write_contents` fills the temporary folder it is given (staging_dir(step)),
  // created empty first. Several ranks write one checkpoint: rank 0 calls save() and, inside write_contents, waits
  // at a barrier until the others wrote their files into staging_dir(step), so the rename covers all of them.
  Status save(int64_t step, const std::function<Status(const std::string& dir)>& write_contents);
  std::string staging_dir(int64_t step) const;
  // Complete checkpoints, oldest first (temporary, pruning and damaged folders are ignored).
  std::vector<CheckpointInfo> list() const;
  // The newest complete checkpoint, or nullopt when there is none.
  std::optional<CheckpointInfo> latest() const;
  // The newest checkpoint that verify() accepts; the newer ones it rejected go to `damaged` (newest first).
  std::optional<CheckpointInfo> latest_valid(std::vector<DamagedCheckpoint>* damaged = nullptr) const;
  // What can be checked without loading the weights: the files a checkpoint needs exist, the safetensors files parse
  // (header, offsets within the file, nothing truncated), trainer_state.json is a JSON object of this step with a
  // loader state, and every file has the size manifest.json recorded (checkpoints written before the manifest
  // existed skip that check). The error names the folder, the file and what is wrong.
  Status verify(const CheckpointInfo& checkpoint) const;
  // Renames a damaged checkpoint to "<name>.damaged" (".damaged.2", ... if taken): kept for inspection, out of the
  // namespace. Returns the new path.
  Expected<std::string> set_aside(const CheckpointInfo& checkpoint) const;
  // Deletes what an interrupted save or prune left (".tmp" and ".pruning" folders). Returns how many.
  int clean_leftovers() const;
  const std::string& dir() const { return dir_; }

 private:
  void prune(int64_t newest_step) const;

  std::string dir_;
  int keep_last_;
};

// The newest checkpoint of run_dir/checkpoints that verify() accepts, for the commands that read a run (eval,
// generate, convert): each damaged newer one is named in a warning from `command` and left in place (only training
// sets checkpoints aside). not_found when none is valid.
Expected<CheckpointInfo> newest_valid_checkpoint(const std::string& run_dir, const std::string& command);

}  // namespace vlm
