// Where this process sits in a distributed launch: its rank, the world size and its place on the node, read from the
// environment the launcher set. Recognized launchers, first match wins:
//   Open MPI's mpirun    OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK, _LOCAL_SIZE
//   PMIx / PMI (MPICH)   PMIX_RANK or PMI_RANK, PMI_SIZE (local rank: MPI_LOCALRANKID when set)
//   Slurm's srun         SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (local size: SLURM_NTASKS_PER_NODE)
//   torchrun-style       RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (as torchrun and most schedulers set them)
// None of them: a world of one. A launcher found with a missing size, a value that is not a whole number, or a rank
// outside [0, size) is an error that names the variable, never a silent world of one.
#pragma once

#include <functional>
#include <string>

#include "core/status.h"

namespace vlm::dist {

struct LaunchInfo {
  int rank = 0, size = 1;              // this process's rank among `size`
  int local_rank = 0, local_size = 1;  // its place among the ranks of its node (local_size 1 when unknown)
  std::string launcher = "none";       // "openmpi", "pmi", "slurm", "torchrun" or "none"
  bool distributed() const { return size > 1; }
};

// Reads the variables through `getenv` (a name to its value, or null when unset): std::getenv in production, a map
// in tests.
Expected<LaunchInfo> launch_info_from_env(const std::function<const char*(const char*)>& getenv);
// The same over this process's environment.
Expected<LaunchInfo> launch_info_from_env();

}  // namespace vlm::dist
