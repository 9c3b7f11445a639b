// Collectives over the ranks of a run: the interface FSDP and the trainer use, with a world-of-one backend, an MPI
// backend for CPU tensors and (CUDA builds) an NCCL backend for GPU tensors. Every rank calls the same collectives
// in the same order with tensors of the same shape and dtype.
//
// Contracts (all tensors contiguous, on the backend's device(); dtypes f32, bf16, f64, i32, i64, and u8 for the
// collectives that do not reduce: all_gather, broadcast and gather):
//   all_reduce(t, op)          t = op over ranks of t, in place. avg is the sum divided by size() (floating dtypes
//                              only). bf16: MPI reduces in f32 and rounds once; NCCL reduces bf16 in its own kernels
//                              (each step of its ring or tree rounds to bf16), so results of several ranks may differ
//                              from MPI's in the last bits.
//   all_gather(out, in)        out = [in of rank 0, in of rank 1, ...]: out.numel() == size() * in.numel().
//   reduce_scatter(out, in, op)  out = this rank's slice of op over ranks of in: in.numel() == size() * out.numel();
//                              rank r gets elements [r * out.numel(), (r + 1) * out.numel()).
//   broadcast(t, root)         t = root's t on every rank.
//   gather(out, in, root)      on root: out = [in of rank 0, in of rank 1, ...], out.numel() == size() * in.numel();
//                              on the other ranks `out` is neither checked nor written (it may be undefined).
// Uneven data (a flat parameter of n elements over size() ranks) is padded by the caller to a multiple of size():
// padded_shard_size() gives the shard length.
// Mismatched sizes, dtypes or devices are reported as errors naming the collective and the tensors, before anything
// is sent (so one rank's bad call does not leave the others waiting in a half-started collective).
//
// Asynchronous forms (`*_async`) issue the collective and return a Work at once:
//   - Ordering: collectives run in the order they were issued (on every rank the same order). On a GPU backend the
//     collective starts after everything enqueued so far on `after` (the stream that wrote the inputs; nullptr: the
//     legacy default stream) and runs on the communicator's own communication stream; CPU backends ignore `after`.
//   - Buffers: the Work holds references to the tensors, so their storage lives until the Work is gone; the caller
//     must not read the outputs or write the inputs before the Work is done (wait) or, on a GPU, before work that
//     was ordered after it (wait_on). A Work dropped after wait_on(s) lets its tensors go without waiting: safe when
//     they were allocated on s (the caching allocator reuses a block only on its own stream), else the caller keeps
//     them until s passes.
//   - Work::is_done() polls (it also drives MPI's progress); Work::wait() blocks the calling thread until the
//     collective is done and returns its error, if any; Work::wait_on(stream) makes `stream` wait for it without
//     blocking the host (a CUDA event; CPU backends wait()). A Work destroyed before either waits for it.
//   - Progress: MPI moves a nonblocking collective forward inside MPI calls (is_done, wait, other collectives) and in
//     its own progress engine where the library has one; NCCL's run on the GPU by themselves.
//   - Timeouts: a collective that has not finished VLM_DIST_TIMEOUT_S seconds after it was issued (a rank that died
//     or never called it, a broken link) is an error naming this rank, the collective, its element count and dtype,
//     and the seconds waited. wait() returns it; on the GPU a watchdog thread also checks every collective in flight
//     (and ncclCommGetAsyncError), and ends the process (status 75) with that message after ncclCommAbort, since the
//     host may be blocked in a stream synchronization that no wait() will ever leave. After any error the
//     communicator is unusable: end the job (abort()).
// The blocking forms are the asynchronous ones followed by wait(). They also take host (CPU) tensors on a GPU
// backend: the host-side values of a run (token and sample counts, loss sums, loader states, checksums) travel through
// a device copy of the tensor (host -> device, the collective, device -> host), so every rank's metadata takes the
// same path as its tensors and no second (CPU) process group is needed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/status.h"
#include "core/tensor.h"
#include "dist/launch_env.h"

namespace vlm::dist {

enum class ReduceOp { sum, avg, max };
const char* reduce_op_name(ReduceOp op);

// A collective in flight (see the asynchronous forms above).
class Work {
 public:
  virtual ~Work() = default;
  virtual bool is_done() = 0;
  virtual Status wait() = 0;
  virtual Status wait_on(StreamHandle stream) { return wait(); }
};
using WorkHandle = std::unique_ptr<Work>;

// A Work that is already done, with `status` as its outcome: what zero-element collectives and a world of one return.
WorkHandle finished_work(Status status = Status());

// The length of each rank's shard of n elements over `ranks` ranks: ceil(n / ranks); the last shards hold padding.
int64_t padded_shard_size(int64_t n, int ranks);

// The seconds a collective may wait (VLM_DIST_TIMEOUT_S).
int collective_timeout_seconds();

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "local", "mpi", "nccl"
  // Where its tensors live: the CPU (local, mpi) or this rank's GPU (nccl).
  virtual Device device() const { return Device::cpu(); }
  // The stream its collectives run on (GPU backends; nullptr on the CPU): a collective of another communicator that
  // reads this one's results waits for them with Work::wait_on(stream()).
  virtual StreamHandle stream() const { return nullptr; }
  // Whether the asynchronous forms take tensors on `d`: its device() (a world of one: any device).
  virtual bool serves(Device d) const { return d == device(); }

  Status all_reduce(Tensor& tensor, ReduceOp op);
  Status all_gather(Tensor& out, const Tensor& in);
  Status reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op);
  Status broadcast(Tensor& tensor, int root);
  Status gather(Tensor& out, const Tensor& in, int root);

  Expected<WorkHandle> all_reduce_async(Tensor& tensor, ReduceOp op, StreamHandle after = nullptr);
  Expected<WorkHandle> all_gather_async(Tensor& out, const Tensor& in, StreamHandle after = nullptr);
  Expected<WorkHandle> reduce_scatter_async(Tensor& out, const Tensor& in, ReduceOp op, StreamHandle after = nullptr);
  Expected<WorkHandle> broadcast_async(Tensor& tensor, int root, StreamHandle after = nullptr);
  Expected<WorkHandle> gather_async(Tensor& out, const Tensor& in, int root, StreamHandle after = nullptr);

  // The ranks of this communicator with the same `color` (>= 0), as a communicator of their own, ordered by `key`
  // (ties by this communicator's rank): a collective every rank calls (MPI_Comm_split, ncclCommSplit). HYBRID_SHARD
  // splits the world into shard groups (color rank / G) and replica groups (color rank % G).
  virtual Expected<std::unique_ptr<Communicator>> split(int color, int key) = 0;

  virtual Status barrier() = 0;
  // Ends every rank's process with exit status `code` (MPI_Abort; NCCL: ncclCommAbort, then this process exits and
  // the launcher ends the others), for a rank that fails where the others wait in a collective it will never join.
  // A world of one returns (its caller reports the error).
  virtual void abort(int code) = 0;

 protected:
  // The backends' parts, called after the arguments were checked (see the contracts above), never with zero
  // elements. `after` as in the asynchronous forms.
  virtual Expected<WorkHandle> do_all_reduce(Tensor& tensor, ReduceOp op, StreamHandle after) = 0;
  virtual Expected<WorkHandle> do_all_gather(Tensor& out, const Tensor& in, StreamHandle after) = 0;
  virtual Expected<WorkHandle> do_reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op, StreamHandle after) = 0;
  virtual Expected<WorkHandle> do_broadcast(Tensor& tensor, int root, StreamHandle after) = 0;
  virtual Expected<WorkHandle> do_gather(Tensor& out, const Tensor& in, int root, StreamHandle after) = 0;
};

// `value` reduced over the ranks by `op`: a one-element all_reduce (T: float, double, int32_t or int64_t).
template <class T>
Expected<T> all_reduce_value(Communicator& comm, T value, ReduceOp op) {
  Tensor t = Tensor::empty({1}, dtype_of<T>());
  t.data<T>()[0] = value;
  VLM_RETURN_IF_ERROR(comm.all_reduce(t, op));
  return t.data<T>()[0];
}

// Every rank's `mine` (any length, possibly empty), in rank order, on every rank: for variable-size records such as
// each rank's data-loader state. Two all_gathers: the lengths, then the bytes padded to the longest.
Expected<std::vector<std::string>> all_gather_strings(Communicator& comm, const std::string& mine);

// Every rank's `mine` (any length, possibly empty), in rank order, on `root` only (the other ranks get an empty
// vector): for records too large to hold on every rank. The lengths go through all_gather, then the bytes through
// gathers of at most `round_bytes` per rank each (padded to the longest), so no single message nears MPI's int
// counts and root's scratch stays size() * round_bytes.
Expected<std::vector<std::string>> gather_strings(Communicator& comm, const std::string& mine, int root,
                                                  size_t round_bytes = size_t{64} << 20);

// Root's `text` (any length) on every rank: its length, then its bytes.
Status broadcast_string(Communicator& comm, std::string& text, int root);

// A world of one: every collective is this rank's own data (copied where out and in differ, on the `after` stream).
// Its tensors may live on any device; device() is `device`, where the run's tensors are.
std::unique_ptr<Communicator> make_local_communicator(Device device = Device::cpu());

// True when vlm_dist was built with MPI (find_package(MPI) found it).
bool built_with_mpi();

// True when vlm_dist was built with NCCL (CUDA builds; the library itself is loaded when first used).
bool built_with_nccl();

// The communicator for this launch's CPU tensors: a world of one when `info` is not distributed, else MPI
// (initialized on first use, finalized at exit; an error when vlm_dist was built without MPI, MPI's world disagrees
// with `info`, or the launch is torchrun-style: CPU runs of several ranks launch with mpirun or srun).
Expected<std::unique_ptr<Communicator>> make_communicator(const LaunchInfo& info);

// The communicator for tensors on `device`: make_communicator(info) for the CPU; NCCL for a GPU (a world of one
// too), on GPU LOCAL_RANK (`info.local_rank`), which must be `device` or cuda without an index. NCCL's unique id
// travels over MPI under mpirun / srun, else through a TCP store at MASTER_ADDR:MASTER_PORT (torchrun-style
// launches and `vlm launch`; see tcp_store.h). NCCL_NVLS_ENABLE is set to 0 unless the user set it.
Expected<std::unique_ptr<Communicator>> make_communicator(const LaunchInfo& info, Device device);

}  // namespace vlm::dist
