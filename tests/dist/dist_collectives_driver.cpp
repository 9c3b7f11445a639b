// Runs every collective of the communicator this launch gets (mpirun: MPI; alone: the world of one) on values whose
// results are exact in every dtype, and checks them against closed forms on every rank (gather: on its root): once
// through the blocking forms, once through the asynchronous ones, then FSDP's pattern of several uneven, padded
// all_gathers and reduce_scatters in flight at once, waited for out of order.
//   dist_collectives_driver check      exit 0 when every check passed on this rank (prints "rank r of n: k checks")
//   dist_collectives_driver check-gpu  the same checks on GPU tensors through NCCL (one rank per GPU: alone, or under
//                                      vlm launch, mpirun or srun); the host helpers' CPU tensors are staged through
//                                      device buffers
//   dist_collectives_driver has-mpi    exit 0 when vlm_dist was built with MPI
//   dist_collectives_driver hang       every rank but the last issues an all_gather the last never joins: rank 0's
//                                      wait() must end with the timeout's error (VLM_DIST_TIMEOUT_S), which it
//                                      prints before aborting the job
//   dist_collectives_driver rendezvous  under vlm launch (a torchrun-style environment): the ranks meet in the
//                                      launch's TCP store and read a value rank 0 set ("rendezvous-missing": the
//                                      last rank leaves without joining, the others must name it)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <functional>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/tcp_store.h"
#include "testing/test_util.h"

namespace {

using vlm::DType;
using vlm::Shape;
using vlm::Tensor;
using vlm::Status;
using vlm::dist::Communicator;
using vlm::dist::ReduceOp;
using vlm::dist::WorkHandle;

// `host` on the communicator's device (itself on the CPU; undefined stays undefined).
Tensor on(const Communicator& comm, const Tensor& host) {
  return !host.defined() || comm.device().is_cpu() ? host : host.to(comm.device());
}
// The device result back into `host` (nothing to do when they share storage).
void fetch(Tensor& host, const Tensor& result) {
  if (host.defined() && result.raw_data() != host.raw_data()) host.copy_from(result);
}

// The collectives through the blocking forms, or through the asynchronous ones (polled once, then waited for), on
// host tensors: uploaded to the communicator's device and back when it is a GPU.
struct Collectives {
  Communicator& comm;
  bool async;
  static Status finish(vlm::Expected<WorkHandle> work) {
    if (!work.ok()) return work.status();
    (void)(*work)->is_done();
    return (*work)->wait();
  }
  Status all_reduce(Tensor& t, ReduceOp op) {
    Tensor d = on(comm, t);
    const Status s = async ? finish(comm.all_reduce_async(d, op)) : comm.all_reduce(d, op);
    fetch(t, d);
    return s;
  }
  Status all_gather(Tensor& out, const Tensor& in) {
    Tensor d = on(comm, out);
    const Status s = async ? finish(comm.all_gather_async(d, on(comm, in))) : comm.all_gather(d, on(comm, in));
    fetch(out, d);
    return s;
  }
  Status reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) {
    Tensor d = on(comm, out);
    const Status s = async ? finish(comm.reduce_scatter_async(d, on(comm, in), op))
                           : comm.reduce_scatter(d, on(comm, in), op);
    fetch(out, d);
    return s;
  }
  Status broadcast(Tensor& t, int root) {
    Tensor d = on(comm, t);
    const Status s = async ? finish(comm.broadcast_async(d, root)) : comm.broadcast(d, root);
    fetch(t, d);
    return s;
  }
  Status gather(Tensor& out, const Tensor& in, int root) {
    Tensor d = on(comm, out);
    const Status s = async ? finish(comm.gather_async(d, on(comm, in), root)) : comm.gather(d, on(comm, in), root);
    fetch(out, d);
    return s;
  }
};

// A [n] tensor of dtype dt with values f(i) (each exact in dt: small whole numbers and halves).
Tensor make(int64_t n, DType dt, const std::function<double(int64_t)>& f) { return vlm::testing::filled({n}, dt, f); }

struct Checker {
  int rank = 0, failures = 0, checks = 0;
  void expect(const Tensor& result, const std::function<double(int64_t)>& want, const std::string& what) {
    ++checks;
    const Tensor got = result.to(vlm::Device::cpu());
    for (int64_t i = 0; i < got.numel(); ++i) {
      const double g = got.item_f32(i), w = want(i);
      if (g != w) {
        std::fprintf(stderr, "rank %d: %s: element %lld is %g, expected %g\n", rank, what.c_str(),
                     static_cast<long long>(i), g, w);
        ++failures;
        return;
      }
    }
  }
  void expect_ok(const vlm::Status& s, const std::string& what) {
    ++checks;
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: %s: %s\n", rank, what.c_str(), s.message().c_str());
      ++failures;
    }
  }
};

// Every collective and dtype through `ops` (blocking or asynchronous).
void check_collectives(Collectives ops, Checker& c) {
  Communicator& comm = ops.comm;
  const int r = comm.rank(), n = comm.size();
  const std::string mode = ops.async ? "async " : "";
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i32, DType::i64}) {
    const std::string name = vlm::dtype_name(dt);
    const bool floating = dt == DType::f32 || dt == DType::bf16 || dt == DType::f64;
    // Sizes: odd, and (f32) one past a few MiB, so messages are split by the MPI library's own protocols.
    for (int64_t m : {int64_t{1}, int64_t{1001}, dt == DType::f32 ? int64_t{(1 << 20) + 3} : int64_t{4097}}) {
      const std::string tag = mode + name + " [" + std::to_string(m) + "] ";
      Tensor t = make(m, dt, [&](int64_t i) { return r + i % 8; });
      c.expect_ok(ops.all_reduce(t, ReduceOp::sum), tag + "all_reduce sum");
      c.expect(t, [&](int64_t i) { return n * (i % 8) + n * (n - 1) / 2.0; }, tag + "all_reduce sum");

      t = make(m, dt, [&](int64_t i) { return (r * 7 + i) % 13; });
      c.expect_ok(ops.all_reduce(t, ReduceOp::max), tag + "all_reduce max");
      c.expect(t, [&](int64_t i) {
        int64_t best = 0;
        for (int q = 0; q < n; ++q) best = std::max<int64_t>(best, (q * 7 + i) % 13);
        return static_cast<double>(best);
      }, tag + "all_reduce max");

      // avg of r + i % 8 over ranks: i % 8 + (n - 1) / 2, a half at most. NCCL scales each input by 1 / n before
      // summing, which is exact only for a power-of-two world.
      const bool exact_avg = comm.device().is_cpu() || (n & (n - 1)) == 0;
      if (floating && exact_avg) {
        t = make(m, dt, [&](int64_t i) { return r + i % 8; });
        c.expect_ok(ops.all_reduce(t, ReduceOp::avg), tag + "all_reduce avg");
        c.expect(t, [&](int64_t i) { return i % 8 + (n - 1) / 2.0; }, tag + "all_reduce avg");
      }

      const Tensor mine = make(m, dt, [&](int64_t i) { return r * 16 + i % 16; });
      Tensor all = Tensor::zeros({n * m}, dt);
      c.expect_ok(ops.all_gather(all, mine), tag + "all_gather");
      c.expect(all, [&](int64_t j) { return (j / m) * 16 + (j % m) % 16; }, tag + "all_gather");

      const Tensor contribution = make(n * m, dt, [&](int64_t j) { return r + j % 8; });
      Tensor slice = Tensor::zeros({m}, dt);
      c.expect_ok(ops.reduce_scatter(slice, contribution, ReduceOp::sum), tag + "reduce_scatter");
      c.expect(slice, [&](int64_t i) { return n * ((r * m + i) % 8) + n * (n - 1) / 2.0; }, tag + "reduce_scatter");

      Tensor b = make(m, dt, [&](int64_t i) { return r * 3 + i % 5; });
      c.expect_ok(ops.broadcast(b, n - 1), tag + "broadcast");
      c.expect(b, [&](int64_t i) { return (n - 1) * 3 + i % 5; }, tag + "broadcast");

      // gather to the last rank; the others pass no output.
      Tensor at_root = r == n - 1 ? Tensor::zeros({n * m}, dt) : Tensor();
      c.expect_ok(ops.gather(at_root, mine, n - 1), tag + "gather");
      if (r == n - 1) c.expect(at_root, [&](int64_t j) { return (j / m) * 16 + (j % m) % 16; }, tag + "gather");
    }
  }
  // Bytes: gathered and broadcast, never reduced.
  for (int64_t m : {int64_t{1}, int64_t{3001}}) {
    const std::string tag = mode + "u8 [" + std::to_string(m) + "] ";
    const Tensor mine = make(m, DType::u8, [&](int64_t i) { return (r * 31 + i) % 256; });
    Tensor all = Tensor::zeros({n * m}, DType::u8);
    c.expect_ok(ops.all_gather(all, mine), tag + "all_gather");
    c.expect(all, [&](int64_t j) { return ((j / m) * 31 + j % m) % 256; }, tag + "all_gather");
    Tensor b = make(m, DType::u8, [&](int64_t i) { return (r + i) % 256; });
    c.expect_ok(ops.broadcast(b, 0), tag + "broadcast");
    c.expect(b, [&](int64_t i) { return i % 256; }, tag + "broadcast");
  }
}

// FSDP's pattern: units of uneven lengths, each padded to a multiple of the world size and sharded; all of their
// all_gathers in flight at once (waited for in reverse), then all of their reduce_scatters (waited for by polling).
void check_sharded_units(Communicator& comm, Checker& c) {
  const int r = comm.rank(), n = comm.size();
  for (DType dt : {DType::f32, DType::bf16}) {
    const std::string name = vlm::dtype_name(dt);
    const std::vector<int64_t> lengths = {1, 7, 1001, 4099, 65537};
    std::vector<Tensor> shards, full;
    std::vector<WorkHandle> works;
    for (int64_t len : lengths) {
      const int64_t shard = vlm::dist::padded_shard_size(len, n);
      // Element j of the unit is j % 251 (padding: -1), and rank r holds elements [r * shard, (r + 1) * shard).
      shards.push_back(on(comm, make(shard, dt, [&](int64_t i) {
        const int64_t j = r * shard + i;
        return j < len ? static_cast<double>(j % 251) : -1.0;
      })));
      full.push_back(on(comm, Tensor::zeros({shard * n}, dt)));
      vlm::Expected<WorkHandle> w = comm.all_gather_async(full.back(), shards.back());
      c.expect_ok(w.ok() ? Status() : w.status(), name + " all_gather_async issue");
      works.push_back(w.ok() ? std::move(*w) : vlm::dist::finished_work());
    }
    for (size_t u = works.size(); u-- > 0;) c.expect_ok(works[u]->wait(), name + " all_gather_async wait");
    for (size_t u = 0; u < lengths.size(); ++u) {
      const int64_t len = lengths[u];
      c.expect(full[u].slice(0, 0, len), [](int64_t j) { return static_cast<double>(j % 251); },
               name + " padded all_gather of " + std::to_string(len));
      c.expect(full[u].slice(0, len, full[u].numel()), [](int64_t) { return -1.0; }, name + " padding");
    }
    // Gradients: rank q contributes (j % 5) + q to element j; the sum over ranks lands in each rank's shard.
    works.clear();
    std::vector<Tensor> grad_shards;
    for (size_t u = 0; u < lengths.size(); ++u) {
      const int64_t shard = shards[u].numel();
      const Tensor grads = on(comm, make(shard * n, dt, [&](int64_t j) { return static_cast<double>(j % 5 + r); }));
      grad_shards.push_back(on(comm, Tensor::zeros({shard}, dt)));
      vlm::Expected<WorkHandle> w = comm.reduce_scatter_async(grad_shards.back(), grads, ReduceOp::sum);
      c.expect_ok(w.ok() ? Status() : w.status(), name + " reduce_scatter_async issue");
      works.push_back(w.ok() ? std::move(*w) : vlm::dist::finished_work());
    }
    for (bool all_done = false; !all_done;) {
      all_done = true;
      for (WorkHandle& w : works) all_done = w->is_done() && all_done;
    }
    for (size_t u = 0; u < lengths.size(); ++u) {
      c.expect_ok(works[u]->wait(), name + " reduce_scatter_async wait");
      const int64_t shard = shards[u].numel();
      c.expect(grad_shards[u], [&](int64_t i) { return n * ((r * shard + i) % 5) + n * (n - 1) / 2.0; },
               name + " sharded reduce_scatter of " + std::to_string(lengths[u]));
    }
  }
}

void check_host_helpers(Communicator& comm, Checker& c);

// Sub-communicators (HYBRID_SHARD's groups): split by rank % 2 (key: descending rank) and by rank / 2; each group's
// all_reduce sums its own ranks only, and the ranks are numbered by key.
void check_split(Communicator& comm, Checker& c) {
  const int r = comm.rank(), n = comm.size();
  for (const bool by_parity : {true, false}) {
    const int color = by_parity ? r % 2 : r / 2;
    vlm::Expected<std::unique_ptr<Communicator>> sub = comm.split(color, by_parity ? n - r : r);
    c.expect_ok(sub.ok() ? Status() : sub.status(), "split");
    if (!sub.ok()) return;
    std::vector<int> members;
    for (int q = 0; q < n; ++q)
      if ((by_parity ? q % 2 : q / 2) == color) members.push_back(q);
    if (by_parity) std::reverse(members.begin(), members.end());
    const int want_rank = static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin());
    ++c.checks;
    if ((*sub)->size() != static_cast<int>(members.size()) || (*sub)->rank() != want_rank) {
      std::fprintf(stderr, "rank %d: split %d: rank %d of %d, expected %d of %zu\n", r, color, (*sub)->rank(),
                   (*sub)->size(), want_rank, members.size());
      ++c.failures;
    }
    Tensor t = on(comm, make(5, DType::f32, [&](int64_t i) { return r + i; }));
    c.expect_ok((*sub)->all_reduce(t, ReduceOp::sum), "split all_reduce");
    double base = 0;
    for (int q : members) base += q;
    c.expect(t, [&](int64_t i) { return base + static_cast<double>(members.size()) * i; }, "split all_reduce");
    // The parent still works beside its groups.
    Tensor all = on(comm, make(1, DType::f32, [](int64_t) { return 1; }));
    c.expect_ok(comm.all_reduce(all, ReduceOp::sum), "all_reduce after split");
    c.expect(all, [&](int64_t) { return n; }, "all_reduce after split");
  }
}

int run_checks(Communicator& comm) {
  const int r = comm.rank(), n = comm.size();
  Checker c;
  c.rank = r;
  check_collectives(Collectives{comm, false}, c);
  check_collectives(Collectives{comm, true}, c);
  check_sharded_units(comm, c);
  check_split(comm, c);
  check_host_helpers(comm, c);  // on a GPU: host tensors staged through device buffers
  // A bad call is refused on every rank before anything is sent, and the next collective still works.
  Tensor wrong = on(comm, Tensor::zeros({n + 1}, DType::f32));
  const vlm::Status refused = comm.all_gather(wrong, on(comm, make(1, DType::f32, [](int64_t) { return 1; })));
  ++c.checks;
  if (refused.ok() || refused.code() != vlm::StatusCode::invalid_argument) {
    std::fprintf(stderr, "rank %d: a mismatched all_gather was not refused\n", r);
    ++c.failures;
  }
  c.expect_ok(comm.barrier(), "barrier");
  std::printf("rank %d of %d (%s): %d checks, %d failed\n", r, n, comm.backend(), c.checks, c.failures);
  return c.failures == 0 ? 0 : 1;
}

// The helpers over host data: all_reduce_value, the string gathers and broadcast_string (CPU tensors, on a GPU
// backend staged through device buffers by the blocking forms).
void check_host_helpers(Communicator& comm, Checker& c) {
  const int r = comm.rank(), n = comm.size();
  // One value: the sum of r + 1 over the ranks.
  {
    const vlm::Expected<int64_t> total = vlm::dist::all_reduce_value(comm, int64_t{r} + 1, ReduceOp::sum);
    ++c.checks;
    if (!total.ok() || *total != int64_t{n} * (n + 1) / 2) {
      std::fprintf(stderr, "rank %d: all_reduce_value: %s\n", r,
                   total.ok() ? std::to_string(*total).c_str() : total.status().message().c_str());
      ++c.failures;
    }
  }
  // Strings of different lengths (rank 0's empty): every rank gets all of them, in rank order.
  {
    auto text_of = [](int q) {
      return std::string(static_cast<size_t>(q) * 1000 + (q % 2) * 7, static_cast<char>('a' + q));
    };
    const vlm::Expected<std::vector<std::string>> all = vlm::dist::all_gather_strings(comm, text_of(r));
    ++c.checks;
    bool ok = all.ok() && all->size() == static_cast<size_t>(n);
    for (int q = 0; ok && q < n; ++q) ok = (*all)[static_cast<size_t>(q)] == text_of(q);
    if (!ok) {
      std::fprintf(stderr, "rank %d: all_gather_strings: %s\n", r,
                   all.ok() ? "wrong contents" : all.status().message().c_str());
      ++c.failures;
    }
  }
  // Strings gathered to one rank in rounds of 1000 bytes (several rounds, ranks of different lengths, rank 0's
  // empty), then one broadcast back from it.
  for (int root : {0, n - 1}) {
    auto text_of = [](int q) {
      std::string t(static_cast<size_t>(q) * 1700 + 3, '\0');
      for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<char>((q * 31 + i) % 251);
      return q == 0 ? std::string() : t;
    };
    const vlm::Expected<std::vector<std::string>> all = vlm::dist::gather_strings(comm, text_of(r), root, 1000);
    ++c.checks;
    bool ok = all.ok() && all->size() == (r == root ? static_cast<size_t>(n) : 0u);
    for (int q = 0; ok && r == root && q < n; ++q) ok = (*all)[static_cast<size_t>(q)] == text_of(q);
    if (!ok) {
      std::fprintf(stderr, "rank %d: gather_strings to %d: %s\n", r, root,
                   all.ok() ? "wrong contents" : all.status().message().c_str());
      ++c.failures;
    }
    std::string text = r == root ? std::string(5000, 'r') + std::to_string(root) : std::string("stale");
    c.expect_ok(vlm::dist::broadcast_string(comm, text, root), "broadcast_string");
    ++c.checks;
    if (text != std::string(5000, 'r') + std::to_string(root)) {
      std::fprintf(stderr, "rank %d: broadcast_string from %d: wrong text of %zu bytes\n", r, root, text.size());
      ++c.failures;
    }
  }
}

int hang(Communicator& comm) {
  const int r = comm.rank(), n = comm.size();
  if (r == n - 1) {  // never joins; MPI_Abort from rank 0 ends it
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  const Tensor mine = make(1001, DType::f32, [](int64_t i) { return static_cast<double>(i); });
  Tensor all = Tensor::zeros({n * 1001}, DType::f32);
  const auto start = std::chrono::steady_clock::now();
  const Status s = comm.all_gather(all, mine);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "rank %d: after %.1f s: %s\n", r, waited, s.ok() ? "completed" : s.message().c_str());
  comm.abort(3);
  return 3;
}

// The launch's store: a rendezvous, a value from rank 0, and rank 0 staying up until every rank has read it.
int rendezvous(const vlm::dist::LaunchInfo& info, bool leave_early) {
  const double timeout = vlm::dist::collective_timeout_seconds();
  vlm::Expected<vlm::dist::LaunchStore*> store = vlm::dist::launch_store(info, timeout);
  if (!store.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", info.rank, store.status().message().c_str());
    return 1;
  }
  if (leave_early && info.rank == info.size - 1) return 0;
  vlm::dist::TcpStoreClient& client = (*store)->client();
  const std::string prefix = (*store)->next_prefix("driver");
  if (Status s = vlm::dist::store_rendezvous(client, prefix, info.rank, info.size, timeout); !s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", info.rank, s.message().c_str());
    return 1;
  }
  if (info.rank == 0 && !client.set(prefix + "/value", "from rank 0 of " + std::to_string(info.size)).ok()) return 1;
  const vlm::Expected<std::string> value = client.get(prefix + "/value", timeout);
  if (!value.ok()) return 1;
  std::printf("rank %d of %d: %s\n", info.rank, info.size, value->c_str());
  if (info.rank != 0) return client.set(prefix + "/read/" + std::to_string(info.rank), "1").ok() ? 0 : 1;
  for (int r = 1; r < info.size; ++r)
    if (!client.get(prefix + "/read/" + std::to_string(r), timeout).ok()) return 1;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  if (mode == "has-mpi") return vlm::dist::built_with_mpi() ? 0 : 1;
  if (mode != "check" && mode != "check-gpu" && mode != "hang" && mode != "rendezvous" &&
      mode != "rendezvous-missing") {
    std::fprintf(stderr, "usage: dist_collectives_driver check|check-gpu|has-mpi|hang|rendezvous|rendezvous-missing\n");
    return 2;
  }
  const vlm::Expected<vlm::dist::LaunchInfo> info = vlm::dist::launch_info_from_env();
  if (!info.ok()) {
    std::fprintf(stderr, "%s\n", info.status().message().c_str());
    return 1;
  }
  if (mode == "rendezvous" || mode == "rendezvous-missing") return rendezvous(*info, mode == "rendezvous-missing");
  vlm::Expected<std::unique_ptr<Communicator>> comm =
      mode == "check-gpu" ? vlm::dist::make_communicator(*info, vlm::Device::cuda())
                          : vlm::dist::make_communicator(*info);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().message().c_str());
    return 1;
  }
  if (mode == "hang") return hang(**comm);
  return run_checks(**comm);
}
