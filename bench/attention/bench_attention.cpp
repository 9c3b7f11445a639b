// `vlm bench attention` (see bench_attention.h). FLOP convention (flash-attention's benchmark):
// fwd = 4 * b * h * s^2 * d, halved when causal; bwd = 2.5 * fwd; fwd+bwd = 3.5 * fwd. Times are medians of --iters
// rounds after --warmup, measured with CUDA events; each round times the forward, the backward and the two back to
// back (whose halves are printed beside it), interleaved (see time_interleaved).
#include "bench/attention/bench_attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "bench/attention/bench_fill.h"
#include "bench/bench_options.h"
#include "core/allocator.h"
#include "core/cuda_check.h"
#include "core/env.h"
#include "kernels/cuda/flash/flash_api.h"
#include "track/progress.h"

namespace vlm::bench {

namespace {

struct Options {
  std::vector<int> head_dims{64, 128};
  std::vector<int> seqlens{512, 1024, 2048, 4096, 8192, 16384};
  std::vector<int> causal{0, 1};
  int tokens = 16384, hidden = 2048, kv_heads = 0, iters = 10, warmup = 3;  // kv_heads 0: as many as q heads
  int repeat = 1;  // calls per timed sample
  std::string path = "auto", peer_json, json_out, peer_script = "bench/peers/attention_sdpa.py";
  bool run_peer = false, deterministic = false;
};

// One declaration per option drives both parsing and --help.
using OptionSpec = bench::OptionSpec<Options>;

bool parse_ints(const std::string& s, std::vector<int>* out) {
  out->clear();
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v <= 0) return false;
    out->push_back(static_cast<int>(v));
  }
  return !out->empty();
}
bool parse_int(const std::string& s, int* out) {
  std::vector<int> v;
  if (!parse_ints(s, &v) || v.size() != 1) return false;
  *out = v[0];
  return true;
}

const std::vector<OptionSpec>& option_specs() {
  static const std::vector<OptionSpec> specs = {
      {"--head-dims", "comma list of head dims (default 64,128)",
       [](Options& o, const std::string& v) { return parse_ints(v, &o.head_dims); }, nullptr},
      {"--seqlens", "comma list of sequence lengths (default 512,...,16384)",
       [](Options& o, const std::string& v) { return parse_ints(v, &o.seqlens); }, nullptr},
      {"--causal", "yes, no or both (default both)",
       [](Options& o, const std::string& v) {
         if (v == "yes") o.causal = {1};
         else if (v == "no") o.causal = {0};
         else if (v == "both") o.causal = {0, 1};
         else return false;
         return true;
       },
       nullptr},
      {"--tokens", "batch * seqlen (default 16384)", [](Options& o, const std::string& v) { return parse_int(v, &o.tokens); },
       nullptr},
      {"--hidden", "heads * head dim (default 2048)", [](Options& o, const std::string& v) { return parse_int(v, &o.hidden); },
       nullptr},
      {"--kv-heads", "key/value heads, dividing hidden / head dim (grouped-query; default: as many as q heads)",
       [](Options& o, const std::string& v) { return parse_int(v, &o.kv_heads); }, nullptr},
      {"--iters", "timed runs per measurement (median; default 10)",
       [](Options& o, const std::string& v) { return parse_int(v, &o.iters); }, nullptr},
      {"--warmup", "untimed runs first (default 3)", [](Options& o, const std::string& v) { return parse_int(v, &o.warmup); },
       nullptr},
      {"--repeat", "calls back to back per timed sample, time per call reported (default 1; more hides host time)",
       [](Options& o, const std::string& v) { return parse_int(v, &o.repeat); }, nullptr},
      {"--path", "auto, portable or hopper (default auto)",
       [](Options& o, const std::string& v) {
         o.path = v;
         return v == "auto" || v == "portable" || v == "hopper";
       },
       nullptr},
      {"--deterministic", "time the deterministic backward", nullptr, [](Options& o) { o.deterministic = true; }},
      {"--peer-json", "read the SDPA peer's figures from this JSON file (attention_sdpa.py --json)",
       [](Options& o, const std::string& v) {
         o.peer_json = v;
         return true;
       },
       nullptr},
      {"--run-peer", "run the peer script (python3) first, on the same shapes", nullptr,
       [](Options& o) { o.run_peer = true; }},
      {"--peer-script", "path of the peer script (default bench/peers/attention_sdpa.py)",
       [](Options& o, const std::string& v) {
         o.peer_script = v;
         return true;
       },
       nullptr},
      {"--json", "write our figures to this JSON file",
       [](Options& o, const std::string& v) {
         o.json_out = v;
         return true;
       },
       nullptr},
  };
  return specs;
}

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Medians over `iters` rounds (after `warmup`) of the forward alone, the backward alone, and the two back to back
// (whole and halves, events between them). The three are interleaved within each round, so a slow spell of the GPU
// (power or clock events last about a second and once fell on every run's 8k row) lands on all of them alike
// instead of on whichever was being timed then. Each sample runs its call `repeat` times back to back and reports
// the time per call: with repeat > 1 the host enqueues the later calls while the GPU runs the earlier ones, so the
// host-side time between kernels (ours: tensor maps, launches) is hidden as it is in a training step.
struct Timings {
  double fwd_ms, bwd_ms, fwdbwd_ms, fwdbwd_fwd_ms, fwdbwd_bwd_ms;
};
Timings time_interleaved(const std::function<void()>& fwd, const std::function<void()>& bwd, int warmup, int iters,
                         int repeat) {
  for (int i = 0; i < warmup; ++i) {
    fwd();
    bwd();
  }
  // Events: one before a sample and one after each call (the pair: after each forward and each backward).
  std::vector<cudaEvent_t> ev(2 * static_cast<size_t>(repeat) + 1);
  for (cudaEvent_t& e : ev) VLM_CUDA_CHECK(cudaEventCreate(&e));
  auto elapsed = [&](size_t a, size_t b) {
    float t = 0;
    VLM_CUDA_CHECK(cudaEventElapsedTime(&t, ev[a], ev[b]));
    return t;
  };
  auto sample = [&](const std::function<void()>& fn) {  // ms per call
    VLM_CUDA_CHECK(cudaEventRecord(ev[0]));
    for (int k = 0; k < repeat; ++k) fn();
    VLM_CUDA_CHECK(cudaEventRecord(ev[1]));
    VLM_CUDA_CHECK(cudaEventSynchronize(ev[1]));
    return elapsed(0, 1) / static_cast<float>(repeat);
  };
  std::vector<float> f, g, fg, fg_f, fg_g;
  for (int i = 0; i < iters; ++i) {
    f.push_back(sample(fwd));
    g.push_back(sample(bwd));
    VLM_CUDA_CHECK(cudaEventRecord(ev[0]));
    for (size_t k = 0; k < static_cast<size_t>(repeat); ++k) {
      fwd();
      VLM_CUDA_CHECK(cudaEventRecord(ev[2 * k + 1]));
      bwd();
      VLM_CUDA_CHECK(cudaEventRecord(ev[2 * k + 2]));
    }
    VLM_CUDA_CHECK(cudaEventSynchronize(ev.back()));
    float first = 0, second = 0;
    for (size_t k = 0; k < static_cast<size_t>(repeat); ++k) {
      first += elapsed(2 * k, 2 * k + 1);
      second += elapsed(2 * k + 1, 2 * k + 2);
    }
    fg_f.push_back(first / static_cast<float>(repeat));
    fg_g.push_back(second / static_cast<float>(repeat));
    fg.push_back(fg_f.back() + fg_g.back());
  }
  for (cudaEvent_t e : ev) VLM_CUDA_CHECK(cudaEventDestroy(e));
  return {median(f), median(g), median(fg), median(fg_f), median(fg_g)};
}

struct Result {
  int d, causal, seqlen, batch, heads;
  Timings ms;
  double fwd_flops;
  std::string path;
  double tflops(double ms, double mult) const { return fwd_flops * mult / (ms * 1e-3) / 1e12; }
};

// A device buffer from the caching allocator, returned on scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : ptr(cuda_allocator(0).allocate(n)), bytes(n) {}
  ~DeviceBuffer() { cuda_allocator(0).deallocate(ptr, bytes); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

Result measure(const Options& opt, int d, bool causal, int s) {
  const int b = std::max(1, opt.tokens / s), h = opt.hidden / d, hkv = opt.kv_heads > 0 ? opt.kv_heads : h;
  const int64_t t = static_cast<int64_t>(b) * s, n = t * h * d, nkv = t * hkv * d;
  DeviceBuffer q(n * 2), k(nkv * 2), v(nkv * 2), out(n * 2), dout(n * 2), dq(n * 2), dk(nkv * 2), dv(nkv * 2);
  DeviceBuffer lse(t * h * 4), cu(static_cast<size_t>(b + 1) * 4);
  fill_random_bf16(q.ptr, n, 1);
  fill_random_bf16(k.ptr, nkv, 2);
  fill_random_bf16(v.ptr, nkv, 3);
  fill_random_bf16(dout.ptr, n, 4);
  std::vector<int32_t> cu_host(b + 1);
  for (int i = 0; i <= b; ++i) cu_host[i] = i * s;
  VLM_CUDA_CHECK(cudaMemcpy(cu.ptr, cu_host.data(), cu_host.size() * 4, cudaMemcpyHostToDevice));
  const flash::FlashPath path = opt.path == "portable" ? flash::FlashPath::portable
                                : opt.path == "hopper" ? flash::FlashPath::hopper
                                                       : flash::FlashPath::auto_select;

  flash::FlashFwdParams f;
  f.q = q.ptr;
  f.k = k.ptr;
  f.v = v.ptr;
  f.out = out.ptr;
  f.lse = static_cast<float*>(lse.ptr);
  f.cu_seqlens_q = f.cu_seqlens_k = static_cast<const int32_t*>(cu.ptr);
  f.q_row_stride = f.out_row_stride = static_cast<int64_t>(h) * d;
  f.k_row_stride = f.v_row_stride = static_cast<int64_t>(hkv) * d;
  f.q_head_stride = f.k_head_stride = f.v_head_stride = f.out_head_stride = d;
  f.lse_head_stride = t;
  f.batch = b;
  f.n_heads_q = h;
  f.n_heads_kv = hkv;
  f.head_dim = d;
  f.max_seqlen_q = f.max_seqlen_k = s;
  f.total_q = f.total_k = static_cast<int>(t);
  f.scale = 1.f / std::sqrt(static_cast<float>(d));
  f.causal = causal;
  f.path = path;

  flash::FlashBwdParams g;
  g.q = q.ptr;
  g.k = k.ptr;
  g.v = v.ptr;
  g.out = out.ptr;
  g.dout = dout.ptr;
  g.lse = f.lse;
  g.dq = dq.ptr;
  g.dk = dk.ptr;
  g.dv = dv.ptr;
  g.cu_seqlens_q = g.cu_seqlens_k = f.cu_seqlens_q;
  g.q_row_stride = g.out_row_stride = g.dout_row_stride = g.dq_row_stride = f.q_row_stride;
  g.k_row_stride = g.v_row_stride = g.dk_row_stride = g.dv_row_stride = f.k_row_stride;
  g.q_head_stride = g.k_head_stride = g.v_head_stride = g.out_head_stride = g.dout_head_stride = g.dq_head_stride =
      g.dk_head_stride = g.dv_head_stride = d;
  g.lse_head_stride = t;
  g.batch = b;
  g.n_heads_q = h;
  g.n_heads_kv = hkv;
  g.head_dim = d;
  g.max_seqlen_q = g.max_seqlen_k = s;
  g.total_q = g.total_k = static_cast<int>(t);
  g.scale = f.scale;
  g.causal = causal;
  g.deterministic = opt.deterministic;
  g.path = path == flash::FlashPath::hopper ? flash::FlashPath::auto_select : path;
  DeviceBuffer ws(flash::flash_bwd_workspace_bytes(g));
  g.workspace = ws.ptr;

  auto fwd = [&] {
    Status st = flash::flash_fwd(f, nullptr);
    VLM_CHECK(st.ok(), st.to_string());
  };
  auto bwd = [&] {
    Status st = flash::flash_bwd(g, nullptr);
    VLM_CHECK(st.ok(), st.to_string());
  };
  Result r;
  r.d = d;
  r.causal = causal;
  r.seqlen = s;
  r.batch = b;
  r.heads = h;
  auto name = [](flash::FlashPath p) { return p == flash::FlashPath::hopper ? "hopper" : "portable"; };
  r.path = std::string(name(flash::flash_fwd_path(f))) + "/" + name(flash::flash_bwd_path(g));
  r.fwd_flops = 4.0 * b * h * static_cast<double>(s) * s * d * (causal ? 0.5 : 1.0);
  r.ms = time_interleaved(fwd, bwd, opt.warmup, opt.iters, opt.repeat);
  VLM_CUDA_CHECK(cudaDeviceSynchronize());
  return r;
}

struct PeerFigure {
  double fwd = 0, bwd = 0, fwdbwd = 0;
};
using PeerKey = std::tuple<int, int, int, std::string>;  // d, causal, seqlen, backend

bool read_peer(const std::string& file, std::map<PeerKey, PeerFigure>* out) {
  std::ifstream in(file);
  if (!in) return false;
  nlohmann::json j;
  try {
    in >> j;
    for (const auto& e : j.at("results")) {
      PeerFigure p;
      p.fwd = e.at("fwd_tflops").get<double>();
      p.bwd = e.at("bwd_tflops").get<double>();
      p.fwdbwd = e.at("fwdbwd_tflops").get<double>();
      (*out)[{e.at("head_dim").get<int>(), e.at("causal").get<bool>() ? 1 : 0, e.at("seqlen").get<int>(),
              e.at("backend").get<std::string>()}] = p;
    }
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "bench attention: cannot parse %s: %s\n", file.c_str(), ex.what());
    return false;
  }
  return true;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

int bench_attention_main(int argc, char** argv) {
  Options opt;
  if (const int code = parse_bench_options("bench attention", argc, argv, option_specs(), 16, opt); code >= 0)
    return code;
  for (int d : opt.head_dims)
    if (opt.hidden % d != 0) {
      std::fprintf(stderr, "bench attention: hidden %d is not a multiple of head dim %d\n", opt.hidden, d);
      return 2;
    } else if (opt.kv_heads < 0 || (opt.kv_heads > 0 && (opt.hidden / d) % opt.kv_heads != 0)) {
      std::fprintf(stderr, "bench attention: --kv-heads %d does not divide the %d query heads of head dim %d\n",
                   opt.kv_heads, opt.hidden / d, d);
      return 2;
    }
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "bench attention: no CUDA device\n");
    return 1;
  }

  std::map<PeerKey, PeerFigure> peer;
  if (opt.run_peer) {
    if (opt.peer_json.empty()) opt.peer_json = "attention_sdpa_peer.json";
    const std::string cmd = "python3 " + opt.peer_script + " --head-dims " + join(opt.head_dims) + " --seqlens " +
                            join(opt.seqlens) + " --tokens " + std::to_string(opt.tokens) + " --hidden " +
                            std::to_string(opt.hidden) + " --kv-heads " + std::to_string(opt.kv_heads) + " --causal " +
                            (opt.causal.size() == 2 ? "both" : opt.causal[0] ? "yes" : "no") + " --iters " +
                            std::to_string(opt.iters) + " --warmup " + std::to_string(opt.warmup) + " --repeat " +
                            std::to_string(opt.repeat) + " --json " +
                            opt.peer_json;
    std::printf("running the peer: %s\n", cmd.c_str());
    std::fflush(stdout);
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "bench attention: the peer script failed\n");
      return 1;
    }
  }
  if (!opt.peer_json.empty() && !read_peer(opt.peer_json, &peer)) {
    std::fprintf(stderr, "bench attention: cannot read peer figures from %s\n", opt.peer_json.c_str());
    return 1;
  }

  cudaDeviceProp prop{};
  VLM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("attention benchmark on %s: tokens %d, hidden %d, median of %d rounds (%d call%s each) after %d "
              "warm-up%s\n",
              prop.name, opt.tokens, opt.hidden, opt.iters, opt.repeat, opt.repeat == 1 ? "" : "s", opt.warmup,
              opt.deterministic ? ", deterministic backward" : "");
  if (const std::string env = vlm_environment(); !env.empty()) std::printf("environment: %s\n", env.c_str());
  std::vector<Result> results;
  ProgressLine progress("bench attention shapes", opt.head_dims.size() * opt.causal.size() * opt.seqlens.size());
  for (int d : opt.head_dims)
    for (int causal : opt.causal)
      for (int s : opt.seqlens) {
        Result r = measure(opt, d, causal != 0, s);
        progress.clear();
        std::printf("d=%3d causal=%d s=%5d b=%2d h=%2d [%s]  fwd %6.1f  bwd %6.1f  fwd+bwd %6.1f TFLOP/s"
                    "  (its halves %.1f / %.1f)\n",
                    d, causal, s, r.batch, r.heads, r.path.c_str(), r.tflops(r.ms.fwd_ms, 1.0),
                    r.tflops(r.ms.bwd_ms, 2.5), r.tflops(r.ms.fwdbwd_ms, 3.5), r.tflops(r.ms.fwdbwd_fwd_ms, 1.0),
                    r.tflops(r.ms.fwdbwd_bwd_ms, 2.5));
        std::fflush(stdout);
        results.push_back(r);
        progress.update(results.size());
      }
  progress.finish(results.size());

  std::printf("\n| d | causal | seqlen | ours fwd | ours bwd | ours fwd+bwd | cuDNN fwd+bwd | FA2 fwd+bwd | "
              "fwd+bwd / cuDNN | fwd+bwd / FA2 | cuDNN fwd | fwd / cuDNN |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Result& r : results) {
    const double of = r.tflops(r.ms.fwd_ms, 1.0), ob = r.tflops(r.ms.bwd_ms, 2.5);
    const double ofb = r.tflops(r.ms.fwdbwd_ms, 3.5);
    auto cd = peer.find({r.d, r.causal, r.seqlen, "cudnn"});
    auto fa = peer.find({r.d, r.causal, r.seqlen, "flash"});
    auto cell = [](bool have, double v, const char* fmt) {
      char buf[32];
      if (!have) return std::string("-");
      std::snprintf(buf, sizeof buf, fmt, v);
      return std::string(buf);
    };
    const bool hc = cd != peer.end(), hf = fa != peer.end();
    std::printf("| %d | %s | %d | %.0f | %.0f | %.0f | %s | %s | %s | %s | %s | %s |\n", r.d, r.causal ? "yes" : "no",
                r.seqlen, of, ob, ofb, cell(hc, hc ? cd->second.fwdbwd : 0, "%.0f").c_str(),
                cell(hf, hf ? fa->second.fwdbwd : 0, "%.0f").c_str(),
                cell(hc, hc ? ofb / cd->second.fwdbwd : 0, "%.2fx").c_str(),
                cell(hf, hf ? ofb / fa->second.fwdbwd : 0, "%.2fx").c_str(),
                cell(hc, hc ? cd->second.fwd : 0, "%.0f").c_str(), cell(hc, hc ? of / cd->second.fwd : 0, "%.2fx").c_str());
  }

  if (!opt.json_out.empty()) {
    nlohmann::json j;
    j["device"] = prop.name;
    j["tokens"] = opt.tokens;
    j["hidden"] = opt.hidden;
    for (const Result& r : results)
      j["results"].push_back({{"head_dim", r.d},
                              {"causal", r.causal != 0},
                              {"seqlen", r.seqlen},
                              {"path", r.path},
                              {"fwd_ms", r.ms.fwd_ms},
                              {"bwd_ms", r.ms.bwd_ms},
                              {"fwdbwd_ms", r.ms.fwdbwd_ms},
                              {"fwdbwd_fwd_ms", r.ms.fwdbwd_fwd_ms},
                              {"fwdbwd_bwd_ms", r.ms.fwdbwd_bwd_ms},
                              {"fwd_tflops", r.tflops(r.ms.fwd_ms, 1.0)},
                              {"bwd_tflops", r.tflops(r.ms.bwd_ms, 2.5)},
                              {"fwdbwd_tflops", r.tflops(r.ms.fwdbwd_ms, 3.5)}});
    std::ofstream(opt.json_out) << j.dump(1) << "\n";
  }
  return 0;
}

}  // namespace vlm::bench
