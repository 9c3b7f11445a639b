// The MPI backend of Communicator for CPU tensors (see communicator.h). MPI is initialized on first use (thread level
// FUNNELED: collectives come from one thread) and finalized at exit; the communicator works on a duplicate of
// MPI_COMM_WORLD so its messages never meet another library's. Counts go to MPI as int: all_reduce and broadcast are
// sent in chunks of at most 2^30 elements, all_gather, gather and reduce_scatter take per-rank parts of at most
// INT_MAX.
// bf16 has no MPI type: it travels as 16-bit words, and its reductions run in f32 and are rounded once; u8 (bytes) is
// gathered and broadcast only.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dist/communicator.h"

#ifdef VLM_DIST_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace vlm::dist {

#ifdef VLM_DIST_MPI

namespace {

Status mpi_status(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return internal_error(str("MPI_", what, " failed: ", std::string(text, static_cast<size_t>(len))));
}

void finalize_at_exit() {
  int finalized = 0;
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
}

Status ensure_initialized() {
  int initialized = 0;
  VLM_RETURN_IF_ERROR(mpi_status(MPI_Initialized(&initialized), "Initialized"));
  if (initialized) return Status();
  int provided = 0;
  VLM_RETURN_IF_ERROR(mpi_status(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "Init_thread"));
  std::atexit(finalize_at_exit);
  // Errors come back as codes (turned into Status) instead of aborting the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return Status();
}

// The MPI type a dtype travels as (bf16: its 16 raw bits).
MPI_Datatype wire_type(DType d) {
  switch (d) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::bf16: return MPI_UINT16_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;  // excluded by Communicator's checks
  }
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

std::vector<float> bf16_to_f32_vector(const Tensor& t) {
  const bf16_t* p = t.data<bf16_t>();
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_f32(p[i].bits);
  return v;
}

// out = v (divided by `divide` when not 1), rounded to bf16 once.
void store_bf16(Tensor& out, const std::vector<float>& v, float divide) {
  bf16_t* p = out.data<bf16_t>();
  for (size_t i = 0; i < v.size(); ++i) p[i].bits = f32_to_bf16(divide == 1.f ? v[i] : v[i] / divide);
}

// avg's division of an f32 or f64 sum (the only dtypes it reaches here: bf16 is divided in f32 before rounding).
void divide_floating(Tensor& t, float by) {
  if (t.dtype() == DType::f64) {
    double* p = t.data<double>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] /= by;
  } else {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] /= by;
  }
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ~MpiCommunicator() override {
    int finalized = 0;
    if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  Status barrier() override { return mpi_status(MPI_Barrier(comm_), "Barrier"); }
  void abort(int code) override {
    std::fflush(nullptr);  // this rank's error message first
    MPI_Abort(comm_, code);
  }

 protected:
  Status do_all_reduce(Tensor& t, ReduceOp op) override {
    const float divide = op == ReduceOp::avg ? static_cast<float>(size_) : 1.f;
    if (t.dtype() == DType::bf16) {
      std::vector<float> v = bf16_to_f32_vector(t);
      VLM_RETURN_IF_ERROR(chunked_all_reduce(v.data(), static_cast<int64_t>(v.size()), MPI_FLOAT, sizeof(float), op));
      store_bf16(t, v, divide);
      return Status();
    }
    VLM_RETURN_IF_ERROR(
        chunked_all_reduce(t.raw_data(), t.numel(), wire_type(t.dtype()), dtype_size(t.dtype()), op));
    if (divide != 1.f) divide_floating(t, divide);
    return Status();
  }

  Status do_all_gather(Tensor& out, const Tensor& in) override {
    VLM_RETURN_IF_ERROR(check_count("all_gather", in.numel()));
    return mpi_status(MPI_Allgather(in.raw_data(), static_cast<int>(in.numel()), wire_type(in.dtype()),
                                    out.raw_data(), static_cast<int>(in.numel()), wire_type(in.dtype()), comm_),
                      "Allgather");
  }

  Status do_reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override {
    VLM_RETURN_IF_ERROR(check_count("reduce_scatter", out.numel()));
    const int count = static_cast<int>(out.numel());
    const float divide = op == ReduceOp::avg ? static_cast<float>(size_) : 1.f;
    if (in.dtype() == DType::bf16) {
      const std::vector<float> v = bf16_to_f32_vector(in);
      std::vector<float> mine(static_cast<size_t>(count));
      VLM_RETURN_IF_ERROR(mpi_status(
          MPI_Reduce_scatter_block(v.data(), mine.data(), count, MPI_FLOAT, mpi_op(op), comm_), "Reduce_scatter"));
      store_bf16(out, mine, divide);
      return Status();
    }
    VLM_RETURN_IF_ERROR(mpi_status(MPI_Reduce_scatter_block(in.raw_data(), out.raw_data(), count,
                                                            wire_type(in.dtype()), mpi_op(op), comm_),
                                   "Reduce_scatter"));
    if (divide != 1.f) divide_floating(out, divide);
    return Status();
  }

  Status do_gather(Tensor& out, const Tensor& in, int root) override {
    VLM_RETURN_IF_ERROR(check_count("gather", in.numel()));
    const int count = static_cast<int>(in.numel());
    void* recv = rank_ == root ? out.raw_data() : nullptr;  // only root's receive buffer is read
    return mpi_status(MPI_Gather(in.raw_data(), count, wire_type(in.dtype()), recv, count, wire_type(in.dtype()), root,
                                 comm_),
                      "Gather");
  }

  Status do_broadcast(Tensor& t, int root) override {
    auto* bytes = static_cast<char*>(t.raw_data());
    const size_t elem = dtype_size(t.dtype());
    for (int64_t off = 0; off < t.numel(); off += kChunk) {
      const int n = static_cast<int>(std::min<int64_t>(kChunk, t.numel() - off));
      VLM_RETURN_IF_ERROR(
          mpi_status(MPI_Bcast(bytes + off * elem, n, wire_type(t.dtype()), root, comm_), "Bcast"));
    }
    return Status();
  }

 private:
  static constexpr int64_t kChunk = int64_t{1} << 30;

  Status chunked_all_reduce(void* data, int64_t n, MPI_Datatype type, size_t elem, ReduceOp op) {
    auto* bytes = static_cast<char*>(data);
    for (int64_t off = 0; off < n; off += kChunk) {
      const int count = static_cast<int>(std::min<int64_t>(kChunk, n - off));
      VLM_RETURN_IF_ERROR(mpi_status(
          MPI_Allreduce(MPI_IN_PLACE, bytes + off * elem, count, type, mpi_op(op), comm_), "Allreduce"));
    }
    return Status();
  }

  static Status check_count(const char* what, int64_t per_rank) {
    if (per_rank > INT_MAX)
      return unsupported(str(what, ": ", per_rank, " elements a rank exceed MPI's int count (", INT_MAX,
                             "); split the tensor"));
    return Status();
  }

  MPI_Comm comm_;
  int rank_, size_;
};

}  // namespace

bool built_with_mpi() { return true; }

Expected<std::unique_ptr<Communicator>> make_mpi_communicator(const LaunchInfo& info) {
  VLM_RETURN_IF_ERROR(ensure_initialized());
  int rank = 0, size = 0;
  VLM_RETURN_IF_ERROR(mpi_status(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "Comm_rank"));
  VLM_RETURN_IF_ERROR(mpi_status(MPI_Comm_size(MPI_COMM_WORLD, &size), "Comm_size"));
  if (rank != info.rank || size != info.size)
    return invalid_argument(str("MPI's world (rank ", rank, " of ", size, ") is not the launch's (rank ", info.rank,
                                " of ", info.size, ", from ", info.launcher, "): launch CPU runs with mpirun or srun"));
  MPI_Comm comm = MPI_COMM_NULL;
  VLM_RETURN_IF_ERROR(mpi_status(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "Comm_dup"));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<Communicator>(std::make_unique<MpiCommunicator>(comm, rank, size));
}

#else  // built without MPI

bool built_with_mpi() { return false; }

Expected<std::unique_ptr<Communicator>> make_mpi_communicator(const LaunchInfo& info) {
  return unsupported(str("the launch has ", info.size, " ranks (", info.launcher,
                         ") but vlm was built without MPI: install Open MPI (libopenmpi-dev) and rebuild"));
}

#endif

}  // namespace vlm::dist
