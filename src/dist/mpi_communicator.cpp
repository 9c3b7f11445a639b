// The MPI backend of Communicator for CPU tensors (see communicator.h). MPI is initialized on first use (thread level
// FUNNELED: collectives come from one thread) and finalized at exit; the communicator works on a duplicate of
// MPI_COMM_WORLD so its messages never meet another library's. Every collective is a nonblocking MPI call
// (MPI_Iallgather, MPI_Ireduce_scatter_block, ...) whose requests an MpiWork tests; its wait() is the watchdog: it
// polls until the requests complete or VLM_DIST_TIMEOUT_S passes. Counts go to MPI as int: all_reduce and broadcast
// are sent in chunks of at most 2^30 elements, all_gather, gather and reduce_scatter take per-rank parts of at most
// INT_MAX.
// bf16 has no MPI type: it travels as 16-bit words, and its reductions run in f32 (a scratch copy the Work holds) and
// are rounded once when the Work completes; u8 (bytes) is gathered and broadcast only.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
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

// One collective's requests, the tensors and scratch they use, and what runs once they complete (bf16 rounding, avg's
// division).
class MpiWork final : public Work {
 public:
  MpiWork(std::string what, int rank) : what_(std::move(what)), rank_(rank), start_(Clock::now()) {}
  ~MpiWork() override {
    if (!finished_) (void)wait();  // the requests write into buffers this Work owns
  }

  std::vector<MPI_Request> requests;
  std::vector<Tensor> keep;      // the caller's tensors, alive until done
  std::vector<float> scratch_in, scratch_out;  // bf16's f32 copies
  std::function<void()> finish;  // runs once, after the requests completed

  bool is_done() override {
    if (finished_) return true;
    int done = 0;
    status_ = mpi_status(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
                         "Testall");
    if (!status_.ok()) {
      finished_ = true;
      status_ = status_.with_context(str("rank ", rank_, ": ", what_));
      return true;
    }
    if (done) complete();
    return finished_;
  }

  Status wait() override {
    const int timeout_s = collective_timeout_seconds();
    const auto deadline = start_ + std::chrono::seconds(timeout_s);
    // Spin briefly (most collectives end within microseconds of the last rank's call), then sleep between polls so
    // ranks that share cores leave them to the peers they wait for.
    for (int polls = 0; !is_done(); ++polls) {
      if (Clock::now() > deadline) {
        finished_ = true;
        status_ = Status(StatusCode::internal,
                         str("rank ", rank_, ": ", what_, " did not complete within ", timeout_s,
                             " s (VLM_DIST_TIMEOUT_S): a rank died, hangs, or did not call it"));
        return status_;
      }
      if (polls < 200) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(polls < 2000 ? 50 : 500));
      }
    }
    return status_;
  }

 private:
  using Clock = std::chrono::steady_clock;
  void complete() {
    finished_ = true;
    if (finish) finish();
    keep.clear();
  }

  std::string what_;
  int rank_;
  Clock::time_point start_;
  bool finished_ = false;
  Status status_;
};

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
  Status barrier() override {
    auto work = std::make_unique<MpiWork>("barrier", rank_);
    work->requests.assign(1, MPI_REQUEST_NULL);
    VLM_RETURN_IF_ERROR(mpi_status(MPI_Ibarrier(comm_, work->requests.data()), "Ibarrier"));
    return work->wait();
  }
  void abort(int code) override {
    std::fflush(nullptr);  // this rank's error message first
    MPI_Abort(comm_, code);
  }
  Expected<std::unique_ptr<Communicator>> split(int color, int key) override {
    if (color < 0) return invalid_argument(str("split: color ", color, " is negative"));
    MPI_Comm sub = MPI_COMM_NULL;
    VLM_RETURN_IF_ERROR(mpi_status(MPI_Comm_split(comm_, color, key, &sub), "Comm_split"));
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    int rank = 0, size = 0;
    VLM_RETURN_IF_ERROR(mpi_status(MPI_Comm_rank(sub, &rank), "Comm_rank"));
    VLM_RETURN_IF_ERROR(mpi_status(MPI_Comm_size(sub, &size), "Comm_size"));
    return std::unique_ptr<Communicator>(std::make_unique<MpiCommunicator>(sub, rank, size));
  }

 protected:
  Expected<WorkHandle> do_all_reduce(Tensor& t, ReduceOp op, StreamHandle) override {
    auto work = start("all_reduce", reduce_op_name(op), t, t.numel());
    work->keep = {t};
    const float divide = op == ReduceOp::avg ? static_cast<float>(size_) : 1.f;
    if (t.dtype() == DType::bf16) {
      work->scratch_out = bf16_to_f32_vector(t);
      std::vector<float>& v = work->scratch_out;
      VLM_RETURN_IF_ERROR(chunked_all_reduce(*work, v.data(), static_cast<int64_t>(v.size()), MPI_FLOAT, sizeof(float),
                                             op));
      work->finish = [w = work.get(), t, divide]() mutable { store_bf16(t, w->scratch_out, divide); };
      return WorkHandle(std::move(work));
    }
    VLM_RETURN_IF_ERROR(
        chunked_all_reduce(*work, t.raw_data(), t.numel(), wire_type(t.dtype()), dtype_size(t.dtype()), op));
    if (divide != 1.f) work->finish = [t, divide]() mutable { divide_floating(t, divide); };
    return WorkHandle(std::move(work));
  }

  Expected<WorkHandle> do_all_gather(Tensor& out, const Tensor& in, StreamHandle) override {
    VLM_RETURN_IF_ERROR(check_count("all_gather", in.numel()));
    auto work = start("all_gather", nullptr, in, in.numel());
    work->keep = {out, in};
    work->requests.assign(1, MPI_REQUEST_NULL);
    VLM_RETURN_IF_ERROR(mpi_status(MPI_Iallgather(in.raw_data(), static_cast<int>(in.numel()), wire_type(in.dtype()),
                                                  out.raw_data(), static_cast<int>(in.numel()), wire_type(in.dtype()),
                                                  comm_, work->requests.data()),
                                   "Iallgather"));
    return WorkHandle(std::move(work));
  }

  Expected<WorkHandle> do_reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op, StreamHandle) override {
    VLM_RETURN_IF_ERROR(check_count("reduce_scatter", out.numel()));
    const int count = static_cast<int>(out.numel());
    const float divide = op == ReduceOp::avg ? static_cast<float>(size_) : 1.f;
    auto work = start("reduce_scatter", reduce_op_name(op), out, out.numel());
    work->keep = {out, in};
    work->requests.assign(1, MPI_REQUEST_NULL);
    if (in.dtype() == DType::bf16) {
      work->scratch_in = bf16_to_f32_vector(in);
      work->scratch_out.resize(static_cast<size_t>(count));
      VLM_RETURN_IF_ERROR(mpi_status(MPI_Ireduce_scatter_block(work->scratch_in.data(), work->scratch_out.data(),
                                                               count, MPI_FLOAT, mpi_op(op), comm_,
                                                               work->requests.data()),
                                     "Ireduce_scatter_block"));
      work->finish = [w = work.get(), out, divide]() mutable { store_bf16(out, w->scratch_out, divide); };
      return WorkHandle(std::move(work));
    }
    VLM_RETURN_IF_ERROR(mpi_status(MPI_Ireduce_scatter_block(in.raw_data(), out.raw_data(), count,
                                                             wire_type(in.dtype()), mpi_op(op), comm_,
                                                             work->requests.data()),
                                   "Ireduce_scatter_block"));
    if (divide != 1.f) work->finish = [out, divide]() mutable { divide_floating(out, divide); };
    return WorkHandle(std::move(work));
  }

  Expected<WorkHandle> do_gather(Tensor& out, const Tensor& in, int root, StreamHandle) override {
    VLM_RETURN_IF_ERROR(check_count("gather", in.numel()));
    const int count = static_cast<int>(in.numel());
    void* recv = rank_ == root ? out.raw_data() : nullptr;  // only root's receive buffer is read
    auto work = start("gather", nullptr, in, in.numel());
    work->keep = {in};
    if (rank_ == root) work->keep.push_back(out);
    work->requests.assign(1, MPI_REQUEST_NULL);
    VLM_RETURN_IF_ERROR(mpi_status(MPI_Igather(in.raw_data(), count, wire_type(in.dtype()), recv, count,
                                               wire_type(in.dtype()), root, comm_, work->requests.data()),
                                   "Igather"));
    return WorkHandle(std::move(work));
  }

  Expected<WorkHandle> do_broadcast(Tensor& t, int root, StreamHandle) override {
    auto work = start("broadcast", nullptr, t, t.numel());
    work->keep = {t};
    auto* bytes = static_cast<char*>(t.raw_data());
    const size_t elem = dtype_size(t.dtype());
    for (int64_t off = 0; off < t.numel(); off += kChunk) {
      const int n = static_cast<int>(std::min<int64_t>(kChunk, t.numel() - off));
      work->requests.push_back(MPI_REQUEST_NULL);
      VLM_RETURN_IF_ERROR(mpi_status(
          MPI_Ibcast(bytes + off * elem, n, wire_type(t.dtype()), root, comm_, &work->requests.back()), "Ibcast"));
    }
    return WorkHandle(std::move(work));
  }

 private:
  static constexpr int64_t kChunk = int64_t{1} << 30;

  // A Work named for timeouts and errors: "all_gather of 1001 bf16 elements a rank (mpi)".
  std::unique_ptr<MpiWork> start(const char* collective, const char* op, const Tensor& t, int64_t count) const {
    return std::make_unique<MpiWork>(str(collective, op ? str(" (", op, ")") : std::string(), " of ", count, " ",
                                         dtype_name(t.dtype()), " elements (mpi, ", size_, " ranks)"),
                                     rank_);
  }

  Status chunked_all_reduce(MpiWork& work, void* data, int64_t n, MPI_Datatype type, size_t elem, ReduceOp op) {
    auto* bytes = static_cast<char*>(data);
    work.requests.reserve(static_cast<size_t>((n + kChunk - 1) / kChunk));
    for (int64_t off = 0; off < n; off += kChunk) {
      const int count = static_cast<int>(std::min<int64_t>(kChunk, n - off));
      work.requests.push_back(MPI_REQUEST_NULL);
      VLM_RETURN_IF_ERROR(mpi_status(MPI_Iallreduce(MPI_IN_PLACE, bytes + off * elem, count, type, mpi_op(op), comm_,
                                                    &work.requests.back()),
                                     "Iallreduce"));
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
