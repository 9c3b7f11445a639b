// The checks every backend shares, the world-of-one backend, and the choice of backend (see communicator.h).
#include "dist/communicator.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/env.h"

namespace vlm::dist {

// mpi_communicator.cpp (an error there when built without MPI).
Expected<std::unique_ptr<Communicator>> make_mpi_communicator(const LaunchInfo& info);
// nccl_communicator.cpp in CUDA builds, else an error.
Expected<std::unique_ptr<Communicator>> make_nccl_communicator(const LaunchInfo& info, Device device);

namespace {

bool collective_dtype(DType d) {
  return d == DType::f32 || d == DType::bf16 || d == DType::f64 || d == DType::i32 || d == DType::i64 ||
         d == DType::u8;
}

class FinishedWork final : public Work {
 public:
  explicit FinishedWork(Status status) : status_(std::move(status)) {}
  bool is_done() override { return true; }
  Status wait() override { return status_; }

 private:
  Status status_;
};

Status check_tensor(const char* what, const char* name, const Tensor& t, const Communicator& comm) {
  if (!t.defined()) return invalid_argument(str(what, ": ", name, " is undefined"));
  if (!collective_dtype(t.dtype()))
    return invalid_argument(
        str(what, ": ", name, " is ", t.describe(), "; collectives take f32, bf16, f64, i32, i64, u8"));
  if (!t.is_contiguous()) return invalid_argument(str(what, ": ", name, " (", t.describe(), ") is not contiguous"));
  if (!comm.serves(t.device()))
    return unsupported(str(what, ": ", name, " (", t.describe(), ") is not on ", comm.device().to_string(),
                           ", where this communicator's tensors live"));
  return Status();
}

Status check_pair(const char* what, const Tensor& out, const Tensor& in, const Communicator& comm) {
  VLM_RETURN_IF_ERROR(check_tensor(what, "out", out, comm));
  VLM_RETURN_IF_ERROR(check_tensor(what, "in", in, comm));
  if (out.dtype() != in.dtype())
    return invalid_argument(str(what, ": out (", out.describe(), ") and in (", in.describe(), ") differ in dtype"));
  return Status();
}

Status check_op(const char* what, const Tensor& t, ReduceOp op) {
  if (t.dtype() == DType::u8)
    return invalid_argument(str(what, ": u8 tensor ", t.describe(), " holds bytes, which are gathered, not reduced"));
  if (op == ReduceOp::avg && (t.dtype() == DType::i32 || t.dtype() == DType::i64))
    return invalid_argument(str(what, ": avg of integer tensor ", t.describe(), " (use sum and divide)"));
  return Status();
}

class LocalCommunicator final : public Communicator {
 public:
  explicit LocalCommunicator(Device device) : device_(device) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "local"; }
  Device device() const override { return device_; }
  bool serves(Device) const override { return true; }
  Status barrier() override { return Status(); }
  void abort(int) override {}
  Expected<std::unique_ptr<Communicator>> split(int color, int) override {
    if (color < 0) return invalid_argument(str("split: color ", color, " is negative"));
    return std::unique_ptr<Communicator>(std::make_unique<LocalCommunicator>(device_));
  }

 protected:
  // op over one rank: the tensor itself
  Expected<WorkHandle> do_all_reduce(Tensor&, ReduceOp, StreamHandle) override { return finished_work(); }
  Expected<WorkHandle> do_all_gather(Tensor& out, const Tensor& in, StreamHandle after) override {
    return copy(out, in, after);
  }
  Expected<WorkHandle> do_reduce_scatter(Tensor& out, const Tensor& in, ReduceOp, StreamHandle after) override {
    return copy(out, in, after);
  }
  Expected<WorkHandle> do_broadcast(Tensor&, int, StreamHandle) override { return finished_work(); }
  Expected<WorkHandle> do_gather(Tensor& out, const Tensor& in, int, StreamHandle after) override {
    return copy(out, in, after);
  }

 private:
  // Flat copies (the shapes may differ: [n] into [1, n]); on a GPU ordered on `after`, as a collective would be.
  static WorkHandle copy(Tensor& out, const Tensor& in, StreamHandle after) {
    if (out.raw_data() != in.raw_data()) out.view({out.numel()}).copy_from(in.view({in.numel()}), after);
    return finished_work();
  }
  Device device_;
};

Status wait_for(Expected<WorkHandle> work) {
  if (!work.ok()) return work.status();
  return (*work)->wait();
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
  }
  return "?";
}

WorkHandle finished_work(Status status) { return std::make_unique<FinishedWork>(std::move(status)); }

int64_t padded_shard_size(int64_t n, int ranks) {
  VLM_CHECK(n >= 0 && ranks >= 1, "padded_shard_size(", n, ", ", ranks, ")");
  return (n + ranks - 1) / ranks;
}

int collective_timeout_seconds() { return env::integer("VLM_DIST_TIMEOUT_S"); }

Expected<WorkHandle> Communicator::all_reduce_async(Tensor& tensor, ReduceOp op, StreamHandle after) {
  VLM_RETURN_IF_ERROR(check_tensor("all_reduce", "tensor", tensor, *this));
  VLM_RETURN_IF_ERROR(check_op("all_reduce", tensor, op));
  if (tensor.numel() == 0) return finished_work();
  return do_all_reduce(tensor, op, after);
}

Expected<WorkHandle> Communicator::all_gather_async(Tensor& out, const Tensor& in, StreamHandle after) {
  VLM_RETURN_IF_ERROR(check_pair("all_gather", out, in, *this));
  if (out.numel() != static_cast<int64_t>(size()) * in.numel())
    return invalid_argument(str("all_gather: out (", out.describe(), ") must hold ", size(), " x in (", in.describe(),
                                ") elements"));
  if (in.numel() == 0) return finished_work();
  return do_all_gather(out, in, after);
}

Expected<WorkHandle> Communicator::reduce_scatter_async(Tensor& out, const Tensor& in, ReduceOp op,
                                                        StreamHandle after) {
  VLM_RETURN_IF_ERROR(check_pair("reduce_scatter", out, in, *this));
  VLM_RETURN_IF_ERROR(check_op("reduce_scatter", in, op));
  if (in.numel() != static_cast<int64_t>(size()) * out.numel())
    return invalid_argument(str("reduce_scatter: in (", in.describe(), ") must hold ", size(), " x out (",
                                out.describe(), ") elements"));
  if (out.numel() == 0) return finished_work();
  return do_reduce_scatter(out, in, op, after);
}

Expected<WorkHandle> Communicator::broadcast_async(Tensor& tensor, int root, StreamHandle after) {
  VLM_RETURN_IF_ERROR(check_tensor("broadcast", "tensor", tensor, *this));
  if (root < 0 || root >= size())
    return invalid_argument(str("broadcast: root ", root, " is not a rank of a world of ", size()));
  if (tensor.numel() == 0) return finished_work();
  return do_broadcast(tensor, root, after);
}

Expected<WorkHandle> Communicator::gather_async(Tensor& out, const Tensor& in, int root, StreamHandle after) {
  if (root < 0 || root >= size())
    return invalid_argument(str("gather: root ", root, " is not a rank of a world of ", size()));
  if (rank() != root) {
    VLM_RETURN_IF_ERROR(check_tensor("gather", "in", in, *this));
  } else {
    VLM_RETURN_IF_ERROR(check_pair("gather", out, in, *this));
    if (out.numel() != static_cast<int64_t>(size()) * in.numel())
      return invalid_argument(str("gather: out (", out.describe(), ") must hold ", size(), " x in (", in.describe(),
                                  ") elements"));
  }
  if (in.numel() == 0) return finished_work();
  return do_gather(out, in, root, after);
}

namespace {

// A host tensor on a GPU backend: its device copy, written back after the collective (see the blocking forms). The
// copies and the collective run on the communicator's own stream, which is not ordered after the compute stream: a
// host value (a token count) does not wait for the training step queued on the device.
class Staged {
 public:
  Staged(const Communicator& comm, Tensor& host) : host_(host), stream_(comm.stream()) {
    if (host.defined() && !comm.serves(host.device()) && host.device().is_cpu() && host.is_contiguous()) {
      device_ = Tensor::empty(host.shape(), host.dtype(), comm.device(), stream_);
      device_.copy_from(host, stream_);
    }
  }
  Tensor& get() { return device_.defined() ? device_ : host_; }
  // The stream the collective waits for: the staging copies', or (a device tensor) the legacy default stream.
  StreamHandle after() const { return device_.defined() ? stream_ : nullptr; }
  Status done(Status s) {
    if (s.ok() && device_.defined()) host_.copy_from(device_, stream_);
    return s;
  }

 private:
  Tensor& host_;
  StreamHandle stream_;
  Tensor device_;
};

}  // namespace

Status Communicator::all_reduce(Tensor& tensor, ReduceOp op) {
  Staged t(*this, tensor);
  return t.done(wait_for(all_reduce_async(t.get(), op, t.after())));
}
Status Communicator::all_gather(Tensor& out, const Tensor& in) {
  Tensor in_copy = in;
  Staged o(*this, out), i(*this, in_copy);
  return o.done(wait_for(all_gather_async(o.get(), i.get(), i.after())));
}
Status Communicator::reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) {
  Tensor in_copy = in;
  Staged o(*this, out), i(*this, in_copy);
  return o.done(wait_for(reduce_scatter_async(o.get(), i.get(), op, i.after())));
}
Status Communicator::broadcast(Tensor& tensor, int root) {
  Staged t(*this, tensor);
  return t.done(wait_for(broadcast_async(t.get(), root, t.after())));
}
Status Communicator::gather(Tensor& out, const Tensor& in, int root) {
  Tensor in_copy = in;
  Staged o(*this, out), i(*this, in_copy);
  return o.done(wait_for(gather_async(o.get(), i.get(), root, i.after())));
}

Expected<std::vector<std::string>> all_gather_strings(Communicator& comm, const std::string& mine) {
  const int n = comm.size();
  Tensor length = Tensor::empty({1}, DType::i64), lengths = Tensor::empty({n}, DType::i64);
  length.data<int64_t>()[0] = static_cast<int64_t>(mine.size());
  VLM_RETURN_IF_ERROR(comm.all_gather(lengths, length).with_context("all_gather_strings (lengths)"));
  int64_t longest = 0;
  for (int r = 0; r < n; ++r) longest = std::max(longest, lengths.data<int64_t>()[r]);
  std::vector<std::string> all(static_cast<size_t>(n));
  if (longest == 0) return all;
  Tensor padded = Tensor::zeros({longest}, DType::u8), gathered = Tensor::empty({n * longest}, DType::u8);
  std::memcpy(padded.raw_data(), mine.data(), mine.size());
  VLM_RETURN_IF_ERROR(comm.all_gather(gathered, padded).with_context("all_gather_strings (bytes)"));
  const char* bytes = static_cast<const char*>(gathered.raw_data());
  for (int r = 0; r < n; ++r)
    all[static_cast<size_t>(r)].assign(bytes + r * longest, static_cast<size_t>(lengths.data<int64_t>()[r]));
  return all;
}

Expected<std::vector<std::string>> gather_strings(Communicator& comm, const std::string& mine, int root,
                                                  size_t round_bytes) {
  const int n = comm.size();
  if (root < 0 || root >= n)
    return invalid_argument(str("gather_strings: root ", root, " is not a rank of a world of ", n));
  if (round_bytes == 0) return invalid_argument("gather_strings: round_bytes is 0");
  Tensor length = Tensor::empty({1}, DType::i64), lengths = Tensor::empty({n}, DType::i64);
  length.data<int64_t>()[0] = static_cast<int64_t>(mine.size());
  VLM_RETURN_IF_ERROR(comm.all_gather(lengths, length).with_context("gather_strings (lengths)"));
  const int64_t* len = lengths.data<int64_t>();
  const int64_t longest = *std::max_element(len, len + n);
  const bool is_root = comm.rank() == root;
  std::vector<std::string> all;
  if (is_root) {
    all.resize(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) all[static_cast<size_t>(r)].resize(static_cast<size_t>(len[r]));
  }
  const int64_t round = static_cast<int64_t>(std::min<size_t>(round_bytes, INT64_MAX));
  Tensor piece, gathered;  // reused while the round size stays the same (all rounds but a shorter last one)
  for (int64_t off = 0; off < longest; off += round) {
    const int64_t m = std::min(round, longest - off);
    if (!piece.defined() || piece.numel() != m) {
      piece = Tensor::empty({m}, DType::u8);
      if (is_root) gathered = Tensor::empty({n * m}, DType::u8);
    }
    // This rank's bytes [off, off + m), zero-padded past its end.
    auto* p = static_cast<char*>(piece.raw_data());
    const int64_t have = std::clamp<int64_t>(static_cast<int64_t>(mine.size()) - off, 0, m);
    if (have > 0) std::memcpy(p, mine.data() + off, static_cast<size_t>(have));
    std::memset(p + have, 0, static_cast<size_t>(m - have));
    VLM_RETURN_IF_ERROR(comm.gather(gathered, piece, root).with_context("gather_strings (bytes)"));
    if (!is_root) continue;
    const char* bytes = static_cast<const char*>(gathered.raw_data());
    for (int r = 0; r < n; ++r) {
      const int64_t take = std::clamp<int64_t>(len[r] - off, 0, m);
      if (take > 0) std::memcpy(all[static_cast<size_t>(r)].data() + off, bytes + r * m, static_cast<size_t>(take));
    }
  }
  return all;
}

Status broadcast_string(Communicator& comm, std::string& text, int root) {
  if (root < 0 || root >= comm.size())
    return invalid_argument(str("broadcast_string: root ", root, " is not a rank of a world of ", comm.size()));
  Tensor length = Tensor::empty({1}, DType::i64);
  length.data<int64_t>()[0] = static_cast<int64_t>(text.size());
  VLM_RETURN_IF_ERROR(comm.broadcast(length, root).with_context("broadcast_string (length)"));
  const int64_t n = length.data<int64_t>()[0];
  if (n == 0) {
    text.clear();
    return Status();
  }
  Tensor bytes = Tensor::empty({n}, DType::u8);
  if (comm.rank() == root) std::memcpy(bytes.raw_data(), text.data(), text.size());
  VLM_RETURN_IF_ERROR(comm.broadcast(bytes, root).with_context("broadcast_string (bytes)"));
  text.assign(static_cast<const char*>(bytes.raw_data()), static_cast<size_t>(n));
  return Status();
}

std::unique_ptr<Communicator> make_local_communicator(Device device) {
  return std::make_unique<LocalCommunicator>(device);
}

Expected<std::unique_ptr<Communicator>> make_communicator(const LaunchInfo& info) {
  if (!info.distributed()) return make_local_communicator();
  if (info.launcher == "torchrun")
    return unsupported(str("the launch has ", info.size, " ranks from RANK / WORLD_SIZE (torchrun-style or vlm launch)"
                           ": CPU tensors travel over MPI, so CPU runs of several ranks launch with mpirun or srun; "
                           "torchrun-style launches bring up NCCL for GPU runs"));
  return make_mpi_communicator(info);
}

Expected<std::unique_ptr<Communicator>> make_communicator(const LaunchInfo& info, Device device) {
  if (device.is_cpu()) return make_communicator(info);
  return make_nccl_communicator(info, device);
}

}  // namespace vlm::dist
