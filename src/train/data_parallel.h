// The ranks of a launch (mpirun / srun / torchrun-style; src/dist) for training: the communicator, the step's
// global target tokens, every rank's loader state for checkpoints, and the replica check of no_shard. How the ranks
// share the model and its gradients is train/fsdp.h. Every rank reads its own share of each epoch (VlmDataOptions
// rank/world); gradients are summed over ranks and scaled by the step's target tokens over all ranks, so each rank
// takes the same optimizer step, as one process with the union of the ranks' batches would. Rank 0 ("lead") writes
// the run directory, metrics and evals. CPU runs use MPI (mpirun, srun); GPU runs use NCCL under any launcher (one
// GPU a rank: GPU LOCAL_RANK), also for a world of one under a launcher; a GPU run without a launcher is a world of
// one without collectives. The host-side values exchanged here travel through the communicator's blocking forms
// (on NCCL: a small device buffer each, see dist/communicator.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/status.h"
#include "dist/communicator.h"
#include "model/parameters.h"

namespace vlm {

class DataParallel {
 public:
  // The launch's ranks (a world of one when not launched by a distributed launcher). device(): where this rank's
  // tensors go (a GPU rank: GPU LOCAL_RANK).
  static Expected<DataParallel> open(Device device);
  Device device() const { return comm_->device(); }

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  bool distributed() const { return size() > 1; }
  bool lead() const { return rank() == 0; }
  int local_size() const { return local_size_; }  // ranks on this node (the launcher's local size; 1 when unknown)
  dist::Communicator& comm() { return *comm_; }

  // The collectives of a step, called by every rank in the same order:
  // the step's target tokens summed over ranks (mine when not distributed);
  Expected<int64_t> global_tokens(int64_t mine);
  // every rank's loader state, in rank order (checkpoints);
  Expected<std::vector<std::string>> loader_states(const std::string& mine);
  // an error naming the ranks whose weights (the f32 masters, bit for bit) differ from rank 0's: the replicas must
  // never drift apart (checked at every checkpoint and at the end of a run). Returns the weights' checksum.
  Expected<uint64_t> check_replicas(const ParameterStore& params);

 private:
  DataParallel(std::unique_ptr<dist::Communicator> comm, int local_size)
      : comm_(std::move(comm)), local_size_(local_size) {}
  std::unique_ptr<dist::Communicator> comm_;
  int local_size_ = 1;
};

}  // namespace vlm
