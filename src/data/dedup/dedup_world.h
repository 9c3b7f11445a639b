// The process group a dedup job runs in: one process, or the ranks of an `mpirun` launch when vlm_dedup was built
// with MPI (find_package(MPI) found it; VLM_DEDUP_MPI). MPI is initialised only when the environment shows an MPI
// launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK), so a plain run never touches MPI. Collectives move
// opaque byte buffers of any size (sent in chunks below 1 GiB, so int counts never overflow).
// One DedupWorld per process (MPI can be initialised once); not thread-safe: call from the main thread.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace vlm {

class DedupWorld {
 public:
  // Joins the MPI job when launched by mpirun (and built with MPI), else a world of one.
  static Expected<DedupWorld*> get();
  ~DedupWorld();
  DedupWorld(const DedupWorld&) = delete;
  DedupWorld& operator=(const DedupWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool uses_mpi() const { return mpi_; }
  static bool built_with_mpi();

  // Rank 0 receives every rank's buffer (index = rank); other ranks get an empty vector.
  Expected<std::vector<std::vector<uint8_t>>> gather_to_root(const std::vector<uint8_t>& mine);
  // Rank 0's `data` on every rank.
  Status broadcast_from_root(std::vector<uint8_t>& data);
  // A status code from rank 0 on every rank (so all ranks stop together when rank 0 fails).
  Status broadcast_status_from_root(Status status);

 private:
  DedupWorld() = default;
  int rank_ = 0, size_ = 1;
  bool mpi_ = false;
};

}  // namespace vlm
