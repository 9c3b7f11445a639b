// The checks every backend shares, the world-of-one backend, and the choice of backend (see communicator.h).
#include "dist/communicator.h"

#include <algorithm>
#include <cstring>

namespace vlm::dist {

// mpi_communicator.cpp (an error there when built without MPI).
Expected<std::unique_ptr<Communicator>> make_mpi_communicator(const LaunchInfo& info);

namespace {

bool collective_dtype(DType d) {
  return d == DType::f32 || d == DType::bf16 || d == DType::f64 || d == DType::i32 || d == DType::i64 ||
         d == DType::u8;
}

Status check_tensor(const char* what, const char* name, const Tensor& t) {
  if (!t.defined()) return invalid_argument(str(what, ": ", name, " is undefined"));
  if (!collective_dtype(t.dtype()))
    return invalid_argument(
        str(what, ": ", name, " is ", t.describe(), "; collectives take f32, bf16, f64, i32, i64, u8"));
  if (!t.is_contiguous()) return invalid_argument(str(what, ": ", name, " (", t.describe(), ") is not contiguous"));
  if (t.device().is_cuda())
    return unsupported(str(what, ": ", name, " (", t.describe(), ") is on a GPU; these backends take CPU tensors"));
  return Status();
}

Status check_pair(const char* what, const Tensor& out, const Tensor& in) {
  VLM_RETURN_IF_ERROR(check_tensor(what, "out", out));
  VLM_RETURN_IF_ERROR(check_tensor(what, "in", in));
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
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "local"; }
  Status barrier() override { return Status(); }
  void abort(int) override {}

 protected:
  Status do_all_reduce(Tensor&, ReduceOp) override { return Status(); }  // op over one rank: the tensor itself
  Status do_all_gather(Tensor& out, const Tensor& in) override { return copy(out, in); }
  Status do_reduce_scatter(Tensor& out, const Tensor& in, ReduceOp) override { return copy(out, in); }
  Status do_broadcast(Tensor&, int) override { return Status(); }

 private:
  static Status copy(Tensor& out, const Tensor& in) {
    if (out.raw_data() != in.raw_data()) std::memcpy(out.raw_data(), in.raw_data(), in.nbytes());
    return Status();
  }
};

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
  }
  return "?";
}

Status Communicator::all_reduce(Tensor& tensor, ReduceOp op) {
  VLM_RETURN_IF_ERROR(check_tensor("all_reduce", "tensor", tensor));
  VLM_RETURN_IF_ERROR(check_op("all_reduce", tensor, op));
  return tensor.numel() == 0 ? Status() : do_all_reduce(tensor, op);
}

Status Communicator::all_gather(Tensor& out, const Tensor& in) {
  VLM_RETURN_IF_ERROR(check_pair("all_gather", out, in));
  if (out.numel() != static_cast<int64_t>(size()) * in.numel())
    return invalid_argument(str("all_gather: out (", out.describe(), ") must hold ", size(), " x in (", in.describe(),
                                ") elements"));
  return in.numel() == 0 ? Status() : do_all_gather(out, in);
}

Status Communicator::reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) {
  VLM_RETURN_IF_ERROR(check_pair("reduce_scatter", out, in));
  VLM_RETURN_IF_ERROR(check_op("reduce_scatter", in, op));
  if (in.numel() != static_cast<int64_t>(size()) * out.numel())
    return invalid_argument(str("reduce_scatter: in (", in.describe(), ") must hold ", size(), " x out (",
                                out.describe(), ") elements"));
  return out.numel() == 0 ? Status() : do_reduce_scatter(out, in, op);
}

Status Communicator::broadcast(Tensor& tensor, int root) {
  VLM_RETURN_IF_ERROR(check_tensor("broadcast", "tensor", tensor));
  if (root < 0 || root >= size())
    return invalid_argument(str("broadcast: root ", root, " is not a rank of a world of ", size()));
  return tensor.numel() == 0 ? Status() : do_broadcast(tensor, root);
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

std::unique_ptr<Communicator> make_local_communicator() { return std::make_unique<LocalCommunicator>(); }

Expected<std::unique_ptr<Communicator>> make_communicator(const LaunchInfo& info) {
  if (!info.distributed()) return make_local_communicator();
  return make_mpi_communicator(info);
}

}  // namespace vlm::dist
