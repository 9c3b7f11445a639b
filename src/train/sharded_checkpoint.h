// The model and optimizer files of a training checkpoint under any FSDP strategy and world size, and reading them
// back onto another world size or strategy (resharding).
//
// Layouts of a checkpoint folder (CheckpointManager writes it atomically as a whole):
//   replicated (no_shard, any world size): rank 0 writes model.safetensors (every parameter, its shape) and
//     optimizer.safetensors ("<param>.exp_avg", "<param>.exp_avg_sq", the step count in the metadata);
//   sharded (shard_grad_op, full_shard): rank r writes model_shard_RRRRR.safetensors (its piece of each parameter,
//     1-D, named as the parameter) and optimizer_shard_RRRRR.safetensors (the moments of those pieces); rank 0 writes
//     fsdp_index.json: world_size, strategy, optimizer_step, the file list, and per parameter its global shape and
//     pieces [{rank, begin, numel}] (elements of the flattened parameter). hybrid_shard: the first shard group's
//     ranks write theirs (the other groups hold the same shards), world_size being the group's size.
// Reading takes any element range of any parameter from either layout, so each rank of a new launch reads exactly
// its own pieces under its own layout.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "train/checkpoint.h"
#include "train/fsdp.h"
#include "train/optimizer.h"

namespace vlm {

inline constexpr const char* kFsdpIndexFile = "fsdp_index.json";

// This rank's files of the checkpoint in `dir` (every rank calls it; under no_shard only rank 0 writes).
Status write_model_and_optimizer(const std::string& dir, Fsdp& fsdp, const AdamW& opt);

// Writes the checkpoint of `step` with every rank (all call it): each rank's model and optimizer files go into the
// staging folder rank 0 created, and `lead_files(dir)` adds rank 0's other files; rank 0 renames the folder into
// place only after a barrier every rank reaches once its files are written, so the checkpoint appears whole or not
// at all (a rank dying midway leaves only the staging folder, removed by the next start).
Status save_checkpoint_all_ranks(CheckpointManager& ckpt, int64_t step, Fsdp& fsdp, const AdamW& opt,
                                 const std::function<Status(const std::string& dir)>& lead_files);

// Parameter values and optimizer moments of a checkpoint folder, in either layout.
class CheckpointTensors {
 public:
  static Expected<CheckpointTensors> open(const std::string& dir);
  bool sharded() const { return sharded_; }
  int world_size() const { return world_size_; }
  const std::string& strategy() const { return strategy_; }
  int64_t optimizer_step() const { return optimizer_step_; }
  // Parameter names in the file's order, and one's global shape (nullptr when absent).
  const std::vector<std::string>& names() const { return names_; }
  const Shape* shape(const std::string& name) const;
  // out (f32, contiguous, any device) = elements [begin, begin + out.numel()) of the flattened parameter `name`
  // (suffix ""), or of its moments (suffix ".exp_avg" / ".exp_avg_sq").
  Status read(const std::string& name, const std::string& suffix, int64_t begin, Tensor& out);

 private:
  struct Piece {
    int rank = 0;
    int64_t begin = 0, numel = 0;
  };
  Expected<const SafetensorsFile*> file(bool optimizer, int rank);

  std::string dir_;
  bool sharded_ = false;
  int world_size_ = 1;
  std::string strategy_ = "no_shard";
  int64_t optimizer_step_ = 0;
  std::vector<std::string> names_;
  std::map<std::string, Shape> shapes_;
  std::map<std::string, std::vector<Piece>> pieces_;
  std::map<std::pair<bool, int>, std::shared_ptr<SafetensorsFile>> files_;
};

// Loads the checkpoint in `dir` (either layout, any world size) into this rank's parameters and moments: its shard
// of every unit (or the whole model under no_shard) and the optimizer's step count.
Status load_model_and_optimizer(const std::string& dir, Fsdp& fsdp, AdamW& opt);

// Every parameter of `params` whole from the checkpoint in `dir` (either layout), on one process: `vlm convert` and
// the other commands that read a run. An error names the missing or mis-shaped tensor.
Status load_checkpoint_weights(const std::string& dir, ParameterStore& params);

}  // namespace vlm
