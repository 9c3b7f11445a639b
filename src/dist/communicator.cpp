// The checks every backend shares, the world-of-one backend, and the choice of backend (see communicator.h).
#include "dist/communicator.h"

#include <algorithm>
#include <cstdint>
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
  Status do_gather(Tensor& out, const Tensor& in, int) override { return copy(out, in); }

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

Status Communicator::gather(Tensor& out, const Tensor& in, int root) {
  if (root < 0 || root >= size())
    return invalid_argument(str("gather: root ", root, " is not a rank of a world of ", size()));
  if (rank() != root) {
    VLM_RETURN_IF_ERROR(check_tensor("gather", "in", in));
  } else {
    VLM_RETURN_IF_ERROR(check_pair("gather", out, in));
    if (out.numel() != static_cast<int64_t>(size()) * in.numel())
      return invalid_argument(str("gather: out (", out.describe(), ") must hold ", size(), " x in (", in.describe(),
                                  ") elements"));
  }
  return in.numel() == 0 ? Status() : do_gather(out, in, root);
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

std::unique_ptr<Communicator> make_local_communicator() { return std::make_unique<LocalCommunicator>(); }

Expected<std::unique_ptr<Communicator>> make_communicator(const LaunchInfo& info) {
  if (!info.distributed()) return make_local_communicator();
  return make_mpi_communicator(info);
}

}  // namespace vlm::dist
