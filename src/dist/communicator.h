// Collectives over the ranks of a run: the interface FSDP and the trainer use, with a world-of-one backend and an MPI
// backend for CPU tensors (NCCL for CUDA tensors is the next backend). Every rank calls the same collectives in the
// same order with tensors of the same shape and dtype; the calls block until this rank's part is done.
//
// Contracts (all tensors contiguous, on the backend's device; dtypes f32, bf16, f64, i32, i64, and u8 for the
// collectives that do not reduce: all_gather and broadcast):
//   all_reduce(t, op)          t = op over ranks of t, in place. bf16 is reduced in f32 and rounded once; avg is the
//                              sum divided by size() (floating dtypes only).
//   all_gather(out, in)        out = [in of rank 0, in of rank 1, ...]: out.numel() == size() * in.numel().
//   reduce_scatter(out, in, op)  out = this rank's slice of op over ranks of in: in.numel() == size() * out.numel();
//                              rank r gets elements [r * out.numel(), (r + 1) * out.numel()).
//   broadcast(t, root)         t = root's t on every rank.
//   gather(out, in, root)      on root: out = [in of rank 0, in of rank 1, ...], out.numel() == size() * in.numel();
//                              on the other ranks `out` is neither checked nor written (it may be undefined).
// Mismatched sizes, dtypes or devices are reported as errors naming the collective and the tensors, before anything
// is sent (so one rank's bad call does not leave the others waiting in a half-started collective).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "dist/launch_env.h"

namespace vlm::dist {

enum class ReduceOp { sum, avg, max };
const char* reduce_op_name(ReduceOp op);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "local", "mpi"

  Status all_reduce(Tensor& tensor, ReduceOp op);
  Status all_gather(Tensor& out, const Tensor& in);
  Status reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op);
  Status broadcast(Tensor& tensor, int root);
  Status gather(Tensor& out, const Tensor& in, int root);
  virtual Status barrier() = 0;
  // Ends every rank's process with exit status `code` (MPI_Abort), for a rank that fails where the others wait in a
  // collective it will never join. A world of one returns (its caller reports the error).
  virtual void abort(int code) = 0;

 protected:
  // The backends' parts, called after the arguments were checked (see the contracts above).
  virtual Status do_all_reduce(Tensor& tensor, ReduceOp op) = 0;
  virtual Status do_all_gather(Tensor& out, const Tensor& in) = 0;
  virtual Status do_reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) = 0;
  virtual Status do_broadcast(Tensor& tensor, int root) = 0;
  virtual Status do_gather(Tensor& out, const Tensor& in, int root) = 0;
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

// A world of one: every collective is this rank's own data (copied where out and in differ).
std::unique_ptr<Communicator> make_local_communicator();

// True when vlm_dist was built with MPI (find_package(MPI) found it).
bool built_with_mpi();

// The communicator for this launch: a world of one when `info` is not distributed, else MPI (initialized on first
// use, finalized at exit; an error when vlm_dist was built without MPI, or MPI's world disagrees with `info`).
Expected<std::unique_ptr<Communicator>> make_communicator(const LaunchInfo& info);

}  // namespace vlm::dist
