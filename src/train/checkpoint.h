// Checkpoint folders: run_dir/checkpoints/step_00000200/{model.safetensors, optimizer.safetensors,
// trainer_state.json}. A checkpoint is written into "step_XXXXXXXX.tmp" and renamed into place only when complete,
// then the `latest` file is replaced atomically and all but the newest `keep_last` are removed. A crash at any
// moment leaves either the old or the new checkpoint, never a torn one.
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

class CheckpointManager {
 public:
  CheckpointManager(std::string dir, int keep_last);

  // Writes the checkpoint of `step`: `write_contents` fills the temporary folder it is given.
  Status save(int64_t step, const std::function<Status(const std::string& dir)>& write_contents);
  // Complete checkpoints, oldest first (temporary folders are ignored).
  std::vector<CheckpointInfo> list() const;
  // The newest complete checkpoint, or nullopt when there is none.
  std::optional<CheckpointInfo> latest() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int keep_last_;
};

}  // namespace vlm
