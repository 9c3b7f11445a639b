// `vlm bench comm` (see bench_comm.h). For each collective, dtype and size: one call on known values checked on
// every rank (rank r contributes r + 1 everywhere: a gather holds each rank's value in its slice, a sum is
// n (n + 1) / 2; exact in bf16 for the world sizes a node has), then `warmup` untimed calls and `iters` timed ones.
// On a GPU the timed calls are issued back to back (asynchronous, the communicator's stream orders them) and waited
// for at the end, as nccl-tests does, so the host's wait does not count per call; on the CPU they are blocking MPI
// calls. The time is rank 0's, between a barrier and the last call's completion. A world of one on a GPU also times a
// device-to-device copy of the same bytes (what its collectives amount to), as the reference its ratio is taken to.
#include "bench/comm/bench_comm.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "bench/bench_options.h"
#include "core/device.h"
#include "dist/communicator.h"

#ifdef VLM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace vlm::bench {
namespace {

using dist::Communicator;
using dist::ReduceOp;

struct Options {
  std::string device = "auto";
  std::vector<std::string> collectives = {"all_gather", "reduce_scatter", "all_reduce"};
  std::vector<DType> dtypes = {DType::bf16, DType::f32};
  int64_t min_bytes = int64_t{1} << 20, max_bytes = int64_t{1} << 30;
  int warmup = 5, iters = 20;
  std::string peer_json, json_out;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const size_t end = comma == std::string::npos ? s.size() : comma;
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// "1048576", "64K", "1M", "1G" (binary units; an optional "iB" or "B" after the letter).
bool parse_bytes(const std::string& v, int64_t* out) {
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || end == v.c_str() || x <= 0) return false;
  std::string unit(end);
  for (const char* tail : {"iB", "B"})
    if (unit.size() > std::string(tail).size() && unit.ends_with(tail)) unit.resize(unit.size() - std::string(tail).size());
  int shift = 0;
  if (unit == "K" || unit == "k") shift = 10;
  else if (unit == "M") shift = 20;
  else if (unit == "G") shift = 30;
  else if (!unit.empty()) return false;
  if (x > (int64_t{1} << (50 - shift))) return false;
  *out = static_cast<int64_t>(x) << shift;
  return true;
}

bool positive_int(const std::string& v, int* out) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x <= 0 || x > 1 << 20) return false;
  *out = static_cast<int>(x);
  return true;
}

const std::vector<OptionSpec<Options>>& option_specs() {
  static const std::vector<OptionSpec<Options>> specs = {
      {"--device", "auto (a GPU when there is one), cuda (NCCL) or cpu (MPI; a world of one alone)",
       [](Options& o, const std::string& v) {
         o.device = v;
         return v == "auto" || v == "cuda" || v == "cpu";
       },
       nullptr},
      {"--collectives", "comma-separated: all_gather, reduce_scatter, all_reduce (default all three)",
       [](Options& o, const std::string& v) {
         o.collectives = split(v);
         for (const auto& c : o.collectives)
           if (c != "all_gather" && c != "reduce_scatter" && c != "all_reduce") return false;
         return !o.collectives.empty();
       },
       nullptr},
      {"--dtypes", "comma-separated: bf16, f32 (fp32 accepted) (default bf16,f32)",
       [](Options& o, const std::string& v) {
         o.dtypes.clear();
         for (const auto& d : split(v)) {
           if (d == "bf16") o.dtypes.push_back(DType::bf16);
           else if (d == "f32" || d == "fp32") o.dtypes.push_back(DType::f32);
           else return false;
         }
         return !o.dtypes.empty();
       },
       nullptr},
      {"--min-bytes", "smallest message, the full buffer's bytes (default 1M; K, M, G are binary units)",
       [](Options& o, const std::string& v) { return parse_bytes(v, &o.min_bytes); }, nullptr},
      {"--max-bytes", "largest message; sizes double from --min-bytes up to it (default 1G)",
       [](Options& o, const std::string& v) { return parse_bytes(v, &o.max_bytes); }, nullptr},
      {"--warmup", "untimed calls per size first (default 5)",
       [](Options& o, const std::string& v) { return positive_int(v, &o.warmup); }, nullptr},
      {"--iters", "timed calls per size (default 20)",
       [](Options& o, const std::string& v) { return positive_int(v, &o.iters); }, nullptr},
      {"--peer", "JSON lines of bench/peers/comm_peer.py (same sizes and ranks): its busbw and our ratio to it",
       [](Options& o, const std::string& v) { return !(o.peer_json = v).empty(); }, nullptr},
      {"--json", "also write one JSON line per collective, dtype and size to this file (rank 0)",
       [](Options& o, const std::string& v) { return !(o.json_out = v).empty(); }, nullptr},
  };
  return specs;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

const char* dtype_label(DType dt) { return dt == DType::bf16 ? "bf16" : "f32"; }

// One collective's buffers at one size: `full` (the gathered output / scattered input / all-reduced buffer) and
// `part` (this rank's slice), both on the communicator's device.
struct Buffers {
  Tensor full, part;
};

Tensor filled(int64_t n, float value, DType dt, Device dev) {
  return Tensor::full({n}, value).to(dt).to(dev);
}

// Checks `t` (on any device) holds `want` in [begin, end): every element up to 2^20 of them, else a strided sample
// plus both ends. Returns an empty string or the first bad element.
std::string check_values(const Tensor& t, int64_t begin, int64_t end, float want) {
  const Tensor host = t.to(Device::cpu());
  const int64_t n = end - begin, stride = std::max<int64_t>(1, n / (int64_t{1} << 20));
  auto bad = [&](int64_t i) {
    const float got = host.item_f32(i);
    return got != want ? "element " + std::to_string(i) + " is " + std::to_string(got) + ", expected " +
                             std::to_string(want)
                       : std::string();
  };
  for (int64_t i = begin; i < end; i += stride)
    if (std::string e = bad(i); !e.empty()) return e;
  return n > 0 ? bad(end - 1) : std::string();
}

class Runner {
 public:
  Runner(Communicator& comm, const Options& o) : comm_(comm), o_(o) {}

  // Issues one call of `what` on `b` (asynchronous on a GPU; blocking on the CPU, as MPI's nonblocking collectives
  // may not share buffers in flight).
  Status issue(const std::string& what, Buffers& b, std::vector<dist::WorkHandle>& works) {
    const bool gpu = comm_.device().is_cuda();
    if (what == "device_copy") {
#ifdef VLM_HAVE_CUDA
      const cudaError_t e = cudaMemcpyAsync(b.part.raw_data(), b.full.raw_data(), b.full.nbytes(),
                                            cudaMemcpyDeviceToDevice, nullptr);
      return e == cudaSuccess ? Status() : internal_error(std::string("cudaMemcpyAsync: ") + cudaGetErrorString(e));
#else
      return internal_error("device_copy needs a CUDA build");
#endif
    }
    if (!gpu) {
      if (what == "all_gather") return comm_.all_gather(b.full, b.part);
      if (what == "reduce_scatter") return comm_.reduce_scatter(b.part, b.full, ReduceOp::sum);
      return comm_.all_reduce(b.full, ReduceOp::sum);
    }
    Expected<dist::WorkHandle> w = what == "all_gather"       ? comm_.all_gather_async(b.full, b.part)
                                   : what == "reduce_scatter" ? comm_.reduce_scatter_async(b.part, b.full, ReduceOp::sum)
                                                              : comm_.all_reduce_async(b.full, ReduceOp::sum);
    if (!w.ok()) return w.status();
    works.push_back(std::move(*w));
    return Status();
  }

  Status finish(std::vector<dist::WorkHandle>& works) {
    Status first;
    for (auto& w : works)
      if (Status s = w->wait(); !s.ok() && first.ok()) first = s;
    works.clear();
#ifdef VLM_HAVE_CUDA
    if (comm_.device().is_cuda() && first.ok() && cudaDeviceSynchronize() != cudaSuccess)
      first = internal_error("cudaDeviceSynchronize failed");
#endif
    return first;
  }

  // Seconds per call of `what`, after checking one call's result (collectives only).
  Expected<double> time_calls(const std::string& what, Buffers& b, DType dt) {
    std::vector<dist::WorkHandle> works;
    const int n = comm_.size(), r = comm_.rank();
    if (what != "device_copy") {
      if (what == "all_gather") b.part = filled(b.part.numel(), static_cast<float>(r + 1), dt, b.part.device());
      else b.full = filled(b.full.numel(), static_cast<float>(r + 1), dt, b.full.device());
      VLM_RETURN_IF_ERROR(issue(what, b, works));
      VLM_RETURN_IF_ERROR(finish(works));
      const float sum = static_cast<float>(n * (n + 1) / 2);
      std::string bad;
      if (what == "all_gather") {
        for (int q = 0; q < n && bad.empty(); ++q)
          bad = check_values(b.full, q * b.part.numel(), (q + 1) * b.part.numel(), static_cast<float>(q + 1));
      } else if (what == "reduce_scatter") {
        bad = check_values(b.part, 0, b.part.numel(), sum);
      } else {
        bad = check_values(b.full, 0, b.full.numel(), sum);
        b.full.zero_();  // repeated sums of zeros stay finite
      }
      if (!bad.empty())
        return internal_error(str("rank ", r, ": ", what, " of ", b.full.numel(), " ", dtype_label(dt),
                                  " elements gave wrong values: ", bad));
    }
    for (int i = 0; i < o_.warmup; ++i) VLM_RETURN_IF_ERROR(issue(what, b, works));
    VLM_RETURN_IF_ERROR(finish(works));
    VLM_RETURN_IF_ERROR(comm_.barrier());
    const double t0 = now();
    for (int i = 0; i < o_.iters; ++i) VLM_RETURN_IF_ERROR(issue(what, b, works));
    VLM_RETURN_IF_ERROR(finish(works));
    return (now() - t0) / o_.iters;
  }

 private:
  Communicator& comm_;
  const Options& o_;
};

double bus_factor(const std::string& what, int n) {
  if (what == "all_reduce") return 2.0 * (n - 1) / n;
  if (what == "device_copy") return 1.0;
  return static_cast<double>(n - 1) / n;
}

// The peer's busbw by (collective, dtype, bytes).
using PeerKey = std::tuple<std::string, std::string, int64_t>;
std::map<PeerKey, double> read_peer(const std::string& path, int* peer_ranks) {
  std::map<PeerKey, double> out;
  std::ifstream in(path);
  if (!in) std::fprintf(stderr, "vlm bench comm: cannot read the peer's results %s\n", path.c_str());
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("busbw_gbps") || !j.contains("bytes")) continue;
    out[{j.value("collective", ""), j.value("dtype", ""), j["bytes"].get<int64_t>()}] = j["busbw_gbps"].get<double>();
    *peer_ranks = j.value("ranks", 0);
  }
  return out;
}

}  // namespace

int bench_comm_main(int argc, char** argv) {
  Options o;
  if (const int code = parse_bench_options("bench comm", argc, argv, option_specs(), 14, o); code >= 0) return code;
  if (o.min_bytes > o.max_bytes) {
    std::fprintf(stderr, "vlm bench comm: --min-bytes %lld is above --max-bytes %lld\n",
                 static_cast<long long>(o.min_bytes), static_cast<long long>(o.max_bytes));
    return 2;
  }
  const bool gpu = o.device == "cuda" || (o.device == "auto" && cuda_available());
  if (gpu && !cuda_available()) {
    std::fprintf(stderr, "vlm bench comm: --device cuda, but no CUDA device (or not a CUDA build)\n");
    return 1;
  }
  const Expected<dist::LaunchInfo> info = dist::launch_info_from_env();
  if (!info.ok()) {
    std::fprintf(stderr, "vlm bench comm: %s\n", info.status().to_string().c_str());
    return 1;
  }
  Expected<std::unique_ptr<Communicator>> made =
      gpu ? dist::make_communicator(*info, Device::cuda()) : dist::make_communicator(*info);
  if (!made.ok()) {
    std::fprintf(stderr, "vlm bench comm: %s\n", made.status().to_string().c_str());
    return 1;
  }
  Communicator& comm = **made;
  const int n = comm.size();
  const bool lead = comm.rank() == 0;
  std::vector<std::string> whats = o.collectives;
  if (gpu && n == 1) whats.push_back("device_copy");
  int peer_ranks = 0;
  const std::map<PeerKey, double> peer = o.peer_json.empty() ? std::map<PeerKey, double>{}
                                                             : read_peer(o.peer_json, &peer_ranks);
  if (lead) {
    std::printf("vlm bench comm: %s on %d rank(s) (%s), %d warm-up + %d timed calls per size, rank 0's time\n",
                comm.backend(), n, comm.device().to_string().c_str(), o.warmup, o.iters);
    if (!peer.empty() && peer_ranks != n)
      std::printf("note: the peer's results are from %d rank(s), ours from %d: the ratio compares unlike runs\n",
                  peer_ranks, n);
    std::printf("%-15s %-5s %12s %11s %11s %11s%s\n", "collective", "dtype", "bytes", "time us", "algbw GB/s",
                "busbw GB/s", peer.empty() ? "" : "  peer busbw  ours/peer");
  }
  std::ofstream json;
  if (lead && !o.json_out.empty()) {
    json.open(o.json_out);
    if (!json) {
      std::fprintf(stderr, "vlm bench comm: cannot write %s\n", o.json_out.c_str());
      return 1;
    }
  }
  Runner runner(comm, o);
  for (const std::string& what : whats)
    for (DType dt : o.dtypes) {
      const int64_t elt = static_cast<int64_t>(dtype_size(dt));
      for (int64_t target = o.min_bytes; target <= o.max_bytes; target *= 2) {
        // Each rank's slice a whole number of elements: the buffer is n slices (a few bytes under `target` when n
        // does not divide it).
        const int64_t shard = std::max<int64_t>(1, target / elt / n);
        Buffers b;
        b.full = Tensor::zeros({shard * n}, dt, comm.device());
        b.part = Tensor::zeros({what == "device_copy" ? shard * n : shard}, dt, comm.device());
        const Expected<double> s = runner.time_calls(what, b, dt);
        if (!s.ok()) {
          std::fprintf(stderr, "vlm bench comm: %s\n", s.status().to_string().c_str());
          comm.abort(1);
          return 1;
        }
        const int64_t bytes = static_cast<int64_t>(b.full.nbytes());
        const double algbw = static_cast<double>(bytes) / *s / 1e9, busbw = algbw * bus_factor(what, n);
        if (!lead) continue;
        std::printf("%-15s %-5s %12lld %11.1f %11.2f %11.2f", what.c_str(), dtype_label(dt),
                    static_cast<long long>(bytes), *s * 1e6, algbw, busbw);
        nlohmann::json j = {{"impl", "vlm.cpp"},   {"backend", comm.backend()}, {"collective", what},
                            {"dtype", dtype_label(dt)}, {"bytes", bytes},       {"ranks", n},
                            {"time_us", *s * 1e6}, {"algbw_gbps", algbw},      {"busbw_gbps", busbw}};
        if (auto it = peer.find({what, dtype_label(dt), bytes}); it != peer.end() && it->second > 0) {
          std::printf("  %11.2f  %8.2fx", it->second, busbw / it->second);
          j["peer_busbw_gbps"] = it->second;
          j["ratio"] = busbw / it->second;
        }
        std::printf("\n");
        std::fflush(stdout);
        if (json.is_open()) json << j.dump() << "\n";
      }
    }
  return 0;
}

}  // namespace vlm::bench
