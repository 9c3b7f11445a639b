// Single-process or MPI dedup world (see dedup_world.h).
#include "data/dedup/dedup_world.h"

#include <cstdlib>
#include <memory>
#include <string>

#ifdef VLM_DEDUP_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only: no C++ bindings to link
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace vlm {
namespace {

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(var)) return true;
  return false;
}

#ifdef VLM_DEDUP_MPI
constexpr size_t kChunk = size_t{1} << 29;  // 512 MiB per message

Status mpi_status(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return internal_error(str("MPI ", what, " failed: ", std::string(text, static_cast<size_t>(len))));
}

Status send_bytes(const std::vector<uint8_t>& data, int dest) {
  uint64_t n = data.size();
  VLM_RETURN_IF_ERROR(mpi_status(MPI_Send(&n, 1, MPI_UINT64_T, dest, 1, MPI_COMM_WORLD), "Send(size)"));
  for (size_t off = 0; off < data.size(); off += kChunk) {
    const int count = static_cast<int>(std::min(kChunk, data.size() - off));
    VLM_RETURN_IF_ERROR(mpi_status(MPI_Send(data.data() + off, count, MPI_BYTE, dest, 2, MPI_COMM_WORLD), "Send"));
  }
  return Status();
}

Status recv_bytes(std::vector<uint8_t>& data, int src) {
  uint64_t n = 0;
  VLM_RETURN_IF_ERROR(
      mpi_status(MPI_Recv(&n, 1, MPI_UINT64_T, src, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "Recv(size)"));
  data.resize(n);
  for (size_t off = 0; off < data.size(); off += kChunk) {
    const int count = static_cast<int>(std::min(kChunk, data.size() - off));
    VLM_RETURN_IF_ERROR(
        mpi_status(MPI_Recv(data.data() + off, count, MPI_BYTE, src, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "Recv"));
  }
  return Status();
}
#endif

}  // namespace

bool DedupWorld::built_with_mpi() {
#ifdef VLM_DEDUP_MPI
  return true;
#else
  return false;
#endif
}

Expected<DedupWorld*> DedupWorld::get() {
  static std::unique_ptr<DedupWorld> world;
  if (world) return world.get();
  world.reset(new DedupWorld());
#ifdef VLM_DEDUP_MPI
  if (launched_by_mpi()) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      if (Status s = mpi_status(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "Init"); !s.ok()) {
        world.reset();
        return s;
      }
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &world->rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world->size_);
    world->mpi_ = true;
  }
#else
  if (launched_by_mpi() && std::getenv("OMPI_COMM_WORLD_SIZE") && std::string(std::getenv("OMPI_COMM_WORLD_SIZE")) != "1")
    return unsupported("launched by mpirun with several ranks, but this build has no MPI (install libopenmpi-dev "
                       "and rebuild): every rank would do the whole job");
#endif
  return world.get();
}

DedupWorld::~DedupWorld() {
#ifdef VLM_DEDUP_MPI
  int finalized = 0;
  if (mpi_ && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
#endif
}

Expected<std::vector<std::vector<uint8_t>>> DedupWorld::gather_to_root(const std::vector<uint8_t>& mine) {
  std::vector<std::vector<uint8_t>> all;
  if (!mpi_) {
    all.push_back(mine);
    return all;
  }
#ifdef VLM_DEDUP_MPI
  if (rank_ == 0) {
    all.resize(static_cast<size_t>(size_));
    all[0] = mine;
    for (int r = 1; r < size_; ++r) VLM_RETURN_IF_ERROR(recv_bytes(all[static_cast<size_t>(r)], r));
  } else {
    VLM_RETURN_IF_ERROR(send_bytes(mine, 0));
  }
#endif
  return all;
}

Status DedupWorld::broadcast_from_root(std::vector<uint8_t>& data) {
  if (!mpi_) return Status();
#ifdef VLM_DEDUP_MPI
  uint64_t n = data.size();
  VLM_RETURN_IF_ERROR(mpi_status(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD), "Bcast(size)"));
  data.resize(n);
  for (size_t off = 0; off < data.size(); off += kChunk) {
    const int count = static_cast<int>(std::min(kChunk, data.size() - off));
    VLM_RETURN_IF_ERROR(mpi_status(MPI_Bcast(data.data() + off, count, MPI_BYTE, 0, MPI_COMM_WORLD), "Bcast"));
  }
#endif
  return Status();
}

Status DedupWorld::broadcast_status_from_root(Status status) {
  if (!mpi_) return status;
  std::string text = status.ok() ? "" : status.message();
  std::vector<uint8_t> bytes(text.begin(), text.end());
  bytes.insert(bytes.begin(), static_cast<uint8_t>(status.code()));
  VLM_RETURN_IF_ERROR(broadcast_from_root(bytes));
  if (bytes.empty() || bytes[0] == static_cast<uint8_t>(StatusCode::ok)) return Status();
  return Status(static_cast<StatusCode>(bytes[0]), str("rank 0: ", std::string(bytes.begin() + 1, bytes.end())));
}

}  // namespace vlm
