// `vlm bench train` (see bench_train.h). Synthetic inputs in the shape of the peer's batch: every sample is the
// preset's image tokens followed by `text_tokens` text tokens, one packed sequence per sample, the loss on the text
// positions (the next token of each). Timing: `warmup` untimed steps, then `steps` steps between two device
// synchronizations (each step = zero grads + forward/backward + AdamW clipped at --grad-clip; as in the trainer, the loss and the grad
// norm are read back in the background and nothing in a step waits for the device). Peak memory: the device caching
// allocator's counters over one more step. Then `profile_steps` steps with every op bracketed by CUDA events
// (kernels/op_profile.h) for the per-op time breakdown, the host's enqueue time of one step against the device's, and
// `trace_steps` steps under CUPTI for the per-kernel device time (kernel_trace_report.h).
#include "bench/train/bench_train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_options.h"
#include "bench/train/bench_train_ranks.h"
#include "bench/train/kernel_trace_report.h"
#include "bench/train/synthetic_batch.h"
#include "core/device.h"
#include "core/env.h"
#include "dist/launch_env.h"
#include "kernels/op_profile.h"
#include "kernels/ops.h"
#include "model/vlm.h"
#include "train/fsdp.h"
#include "train/memory_report.h"
#include "train/optimizer.h"
#include "track/progress.h"
#include "train/train_flops.h"

namespace vlm::bench {
namespace {

constexpr double kPeakTflops = 989.0;  // H100/H200 SXM dense bf16

struct Options {
  std::string preset = "nanovlm-222m";
  int batch = 64, text_tokens = 128, steps = 20, warmup = 5;
  std::string precision = "bf16";
  int profile_steps = 3;
  int trace_steps = 2;  // 0: no kernel trace
  float grad_clip = ops::AdamWSettings{}.grad_clip;  // as the trainer: global-norm clipping at 1 (0 = off)
  bool gemm_autotune = true;
  bool deterministic = false;
  std::string recompute = "none";
  std::string attention = "flash";  // or "simple" (ops::set_attention_flash)
  std::string peer_json, json_out;
  // The multi-rank benchmark (bench_train_ranks.h): taken under a launch of several ranks, on the CPU, or with --fsdp.
  std::string device = "cuda";
  std::string fsdp;  // empty: full_shard under several ranks, else the single-device benchmark
  std::string reduce_dtype = "f32";
  std::string baseline_json;
};

bool positive_int(const std::string& v, int* out) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x <= 0 || x > 1 << 30) return false;
  *out = static_cast<int>(x);
  return true;
}

bool non_negative_int(const std::string& v, int* out) {
  if (v == "0") {
    *out = 0;
    return true;
  }
  return positive_int(v, out);
}

const std::vector<OptionSpec<Options>>& option_specs() {
  static const std::vector<OptionSpec<Options>> specs = {
      {"--preset", "model shape preset (default nanovlm-222m)",
       [](Options& o, const std::string& v) { return !(o.preset = v).empty(); }, nullptr},
      {"--batch", "samples per step (default 64)",
       [](Options& o, const std::string& v) { return positive_int(v, &o.batch); }, nullptr},
      {"--text-tokens", "text tokens per sample after the image tokens (default 128)",
       [](Options& o, const std::string& v) { return positive_int(v, &o.text_tokens); }, nullptr},
      {"--steps", "timed steps (default 20)",
       [](Options& o, const std::string& v) { return positive_int(v, &o.steps); }, nullptr},
      {"--warmup", "untimed steps first (default 5)",
       [](Options& o, const std::string& v) { return non_negative_int(v, &o.warmup); }, nullptr},
      {"--precision", "bf16 or fp32 (default bf16)",
       [](Options& o, const std::string& v) { return (v == "bf16" || v == "fp32") && !(o.precision = v).empty(); },
       nullptr},
      {"--profile-steps", "steps recorded op by op for the time breakdown, after the timed ones (default 3)",
       [](Options& o, const std::string& v) { return positive_int(v, &o.profile_steps); }, nullptr},
      {"--trace-steps",
       "steps traced kernel by kernel with CUPTI after the profiled ones: device busy/idle/concurrent time and the "
       "largest kernels (default 2; 0: none)",
       [](Options& o, const std::string& v) { return non_negative_int(v, &o.trace_steps); }, nullptr},
      {"--grad-clip",
       "global gradient-norm clipping threshold of the AdamW step, as train.grad_clip (default 1; 0: off). The "
       "PyTorch peer takes the same option, so both steps do the same work",
       [](Options& o, const std::string& v) {
         char* end = nullptr;
         const float x = std::strtof(v.c_str(), &end);
         if (v.empty() || *end != '\0' || !(x >= 0.f) || !std::isfinite(x)) return false;
         o.grad_clip = x;
         return true;
       },
       nullptr},
      {"--recompute", "none or blocks: recompute each block's activations before its backward (default none)",
       [](Options& o, const std::string& v) { return parse_recompute(v).ok() && !(o.recompute = v).empty(); },
       nullptr},
      {"--deterministic",
       "bit-identical results run to run, as train.deterministic: the deterministic attention backward and "
       "cuBLASLt's heuristic GEMM algorithms (ops::set_deterministic)",
       nullptr, [](Options& o) { o.deterministic = true; }},
      {"--attention",
       "flash (our FlashAttention kernels, the default) or simple (the correct but slow CUDA attention they "
       "replaced: ops::set_attention_flash(false)), to compare the two in the step",
       [](Options& o, const std::string& v) {
         o.attention = v;
         return v == "flash" || v == "simple";
       },
       nullptr},
      {"--no-gemm-autotune",
       "cuBLASLt's heuristic algorithm per GEMM instead of the fastest of its top choices timed on first use",
       nullptr, [](Options& o) { o.gemm_autotune = false; }},
      {"--peer",
       "JSON lines of bench/peers/train_nanovlm.py (same shape): its modes and our ratio to each; multi-rank: of "
       "bench/peers/fsdp2_peer.py (the line of the same preset and world size)",
       [](Options& o, const std::string& v) { return !(o.peer_json = v).empty(); }, nullptr},
      {"--device",
       "cuda (default) or cpu; cpu runs the multi-rank benchmark (fp32, CPU ranks over MPI under mpirun)",
       [](Options& o, const std::string& v) { return (v == "cuda" || v == "cpu") && !(o.device = v).empty(); },
       nullptr},
      {"--fsdp",
       "no_shard, shard_grad_op or full_shard: the multi-rank benchmark (every rank of the launch trains its own "
       "--batch; per-rank and total samples/s and tokens/s, memory per rank against FSDP's formula). Default: "
       "full_shard under a launch of several ranks, else the single-device benchmark",
       [](Options& o, const std::string& v) { return parse_fsdp_strategy(v).ok() && !(o.fsdp = v).empty(); },
       nullptr},
      {"--reduce-dtype", "multi-rank: gradients on the wire in f32 (default) or bf16, as train.fsdp_reduce_dtype",
       [](Options& o, const std::string& v) { return (v == "f32" || v == "bf16") && !(o.reduce_dtype = v).empty(); },
       nullptr},
      {"--baseline-json",
       "multi-rank: a single-rank result (this benchmark's --json on one device, or a world of one) for the weak "
       "scaling efficiency: total samples/s / (ranks x its samples/s)",
       [](Options& o, const std::string& v) { return !(o.baseline_json = v).empty(); }, nullptr},
      {"--json", "also write every figure to this JSON file (multi-rank: one JSON line, rank 0)",
       [](Options& o, const std::string& v) { return !(o.json_out = v).empty(); }, nullptr},
  };
  return specs;
}

void sync(Device dev) { (void)ops::check_index_errors(dev); }  // synchronizes the device

// Prints where the profiled steps' device time went: per op (summed over call sites), then the largest call sites
// ("<scope>/<op> <shape>"), as ms per step and share of the step; the gap is step time no op covered (launch
// latency the GPU waited for, host-side work, allocator calls). With weight gradients on the side stream an op's
// time includes whatever side-stream work overlapped it (a norm backward beside a dw GEMM looks 3-4x slower), so the
// per-op figures show the critical path, not each kernel's cost. Returns the same as JSON.
nlohmann::json print_breakdown(const std::vector<ops::profile::OpTime>& times, int steps, double profiled_step_s,
                               double step_s) {
  const double step_ms = profiled_step_s * 1e3;
  std::map<std::string, std::pair<int64_t, double>> per_op;
  double covered = 0;
  for (const auto& t : times) {
    per_op[t.op].first += t.calls;
    per_op[t.op].second += t.ms;
    covered += t.ms;
  }
  std::vector<std::pair<std::string, std::pair<int64_t, double>>> ops_sorted(per_op.begin(), per_op.end());
  std::sort(ops_sorted.begin(), ops_sorted.end(),
            [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  std::printf("\ntime breakdown: %d profiled steps of %.2f ms (unprofiled %.2f ms; CUDA events around every op)\n",
              steps, step_ms, step_s * 1e3);
  std::printf("  (an op's time is the main stream's between its events, so it includes the side stream's weight\n"
              "  gradients that overlapped it; dev/gpu/gpu_kernel_profile.sh times each kernel alone)\n");
  std::printf("  %-34s %8s %10s %7s\n", "op", "calls", "ms/step", "share");
  nlohmann::json j_ops = nlohmann::json::array(), j_sites = nlohmann::json::array();
  for (const auto& [op, v] : ops_sorted) {
    const double ms = v.second / steps;
    std::printf("  %-34s %8lld %10.3f %6.1f%%\n", op.c_str(), static_cast<long long>(v.first / steps), ms,
                100 * ms / step_ms);
    j_ops.push_back({{"op", op}, {"calls_per_step", v.first / steps}, {"ms_per_step", ms}});
  }
  const double gap_ms = step_ms - covered / steps;
  std::printf("  %-34s %8s %10.3f %6.1f%%\n", "(gaps between ops)", "", gap_ms, 100 * gap_ms / step_ms);
  std::printf("\n  %-58s %6s %10s %7s\n", "largest call sites", "calls", "ms/step", "share");
  for (size_t i = 0; i < times.size(); ++i) {
    const double ms = times[i].ms / steps;
    if (i < 40) {
      std::printf("  %-58s %6lld %10.3f %6.1f%%\n", times[i].key.c_str(),
                  static_cast<long long>(times[i].calls / steps), ms, 100 * ms / step_ms);
    }
    j_sites.push_back({{"key", times[i].key}, {"calls_per_step", times[i].calls / steps}, {"ms_per_step", ms}});
  }
  return {{"profiled_step_ms", step_ms}, {"gap_ms", gap_ms}, {"ops", j_ops}, {"sites", j_sites}};
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// How long the host takes to enqueue one step against how long the device takes to run it, from a synchronized
// device: the host clock when step() returns (nothing in a step waits for the device) and once the device is done.
// Medians of `reps`. Enqueue time near the device's means the device waits for the host (launch-bound), or that
// something in the step waits for the device.
struct EnqueueTime {
  double host_ms = 0, device_ms = 0;
};
EnqueueTime time_enqueue(const std::function<void()>& step, Device dev, int reps) {
  std::vector<double> host, device;
  for (int i = 0; i < reps; ++i) {
    sync(dev);
    const double t0 = now();
    step();
    const double t1 = now();
    sync(dev);
    host.push_back((t1 - t0) * 1e3);
    device.push_back((now() - t0) * 1e3);
  }
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  return {median(host), median(device)};
}

}  // namespace

int bench_train_main(int argc, char** argv) {
  Options o;
  if (const int code = parse_bench_options("bench train", argc, argv, option_specs(), 16, o); code >= 0) return code;
  const Expected<dist::LaunchInfo> launch = dist::launch_info_from_env();
  if (o.device == "cpu" || !o.fsdp.empty() || (launch.ok() && launch->distributed()) || !launch.ok()) {
    if (o.device == "cpu" && o.precision == "bf16") o.precision = "fp32";  // the CPU trains in fp32
    TrainRanksOptions r;
    r.preset = o.preset;
    r.device = o.device;
    r.batch = o.batch;
    r.text_tokens = o.text_tokens;
    r.steps = o.steps;
    r.warmup = o.warmup;
    r.precision = o.precision;
    r.grad_clip = o.grad_clip;
    r.recompute = o.recompute;
    r.fsdp = o.fsdp.empty() ? "full_shard" : o.fsdp;
    r.reduce_dtype = o.reduce_dtype;
    r.baseline_json = o.baseline_json;
    r.peer_json = o.peer_json;
    r.json_out = o.json_out;
    if (o.device == "cuda") {
      ops::set_deterministic(o.deterministic);
      ops::set_attention_flash(o.attention == "flash");
      if (!o.gemm_autotune) ops::set_gemm_autotune(false);
    }
    return bench_train_ranks(r);
  }
  if (!cuda_available()) {
    std::fprintf(stderr, "vlm bench train: no CUDA device\n");
    return 1;
  }
  ModelConfig cfg;
  if (Status s = apply_model_preset(o.preset, cfg); !s.ok()) {
    std::fprintf(stderr, "vlm bench train: %s\n", s.to_string().c_str());
    return 2;
  }
  const Device dev = Device::cuda(0);
  ops::set_deterministic(o.deterministic);
  ops::set_attention_flash(o.attention == "flash");
  if (!o.gemm_autotune) ops::set_gemm_autotune(false);
  const DType dtype = o.precision == "bf16" ? DType::bf16 : DType::f32;
  VlmModel model(cfg, dev, dtype);
  model.init_weights(1);
  model.set_recompute(*parse_recompute(o.recompute));
  ops::AdamWSettings adamw;
  adamw.grad_clip = o.grad_clip;
  AdamW opt(model.params(), adamw);
  const VlmInputs in = synthetic_batch(cfg, o.batch, o.text_tokens, dev);
  const float grad_scale = 1.f / static_cast<float>(o.batch * o.text_tokens);
  StepLoss last_loss;  // read once the timed steps are done
  auto step = [&] {
    {
      const ops::profile::ProfileScope scope("zero_grads");
      model.params().zero_grads();
    }
    last_loss = model.forward_backward(in, grad_scale);
    const ops::profile::ProfileScope scope("optimizer");
    opt.step(1e-4f);
  };
  std::printf("vlm bench train: preset %s (%.1fM parameters), %s, batch %d x (%d image + %d text tokens), "
              "recompute %s, attention %s\n",
              o.preset.c_str(), static_cast<double>(model.params().numel()) / 1e6, o.precision.c_str(), o.batch,
              cfg.image_tokens(), o.text_tokens, o.recompute.c_str(), o.attention.c_str());
  if (const std::string env = vlm_environment(); !env.empty()) std::printf("environment: %s\n", env.c_str());
  // Progress over every step this benchmark runs before its report (updates never wait for the device).
  ProgressLine progress("bench train steps", static_cast<uint64_t>(o.warmup + o.steps + 1 + o.profile_steps));
  uint64_t steps_run = 0;
  const auto counted_step = [&] {
    step();
    progress.update(++steps_run);
  };
  const double t_warm = now();
  for (int i = 0; i < o.warmup; ++i) counted_step();
  sync(dev);
  const double warmup_s = now() - t_warm;
  const double t0 = now();
  for (int i = 0; i < o.steps; ++i) counted_step();
  sync(dev);
  const double step_s = (now() - t0) / o.steps;
  const double loss = last_loss.mean();  // the last timed step's
  StepMemoryMeter meter(dev);
  meter.begin();
  counted_step();
  sync(dev);
  const MemoryReport mem = meter.end(model.params(), opt.state_bytes(), o.precision);
  ops::profile::profile_begin();
  const double t_prof = now();
  for (int i = 0; i < o.profile_steps; ++i) counted_step();
  sync(dev);
  const double profiled_step_s = (now() - t_prof) / o.profile_steps;
  progress.finish(steps_run);
  const std::vector<ops::profile::OpTime> times = ops::profile::profile_end();
  const EnqueueTime enqueue = time_enqueue(step, dev, 5);
  const KernelTraceReport trace = o.trace_steps > 0 ? trace_kernels(o.trace_steps, step) : KernelTraceReport{};

  const double flops = train_flops_per_sample(cfg, o.text_tokens);
  const double sps = o.batch / step_s, tflops = sps * flops / 1e12;
  nlohmann::json ours = {{"peer", "vlm.cpp"},        {"mode", o.precision},
                         {"gemm_autotune", o.gemm_autotune && !o.deterministic}, {"recompute", o.recompute},
                         {"attention", o.attention}, {"deterministic", o.deterministic}, {"grad_clip", o.grad_clip},
                         {"batch", o.batch},         {"samples_per_s", sps},
                         {"step_ms", step_s * 1e3},  {"tflops", tflops},
                         {"mfu", tflops / kPeakTflops}, {"peak_gb", static_cast<double>(mem.step_peak_bytes) / 1e9},
                         {"warmup_s", warmup_s},     {"loss", loss},
                         {"gflop_per_sample", flops / 1e9}, {"memory", nlohmann::json::parse(mem.to_json())}};

  std::printf("\n%-26s %10s %9s %9s %7s %9s\n", "", "samples/s", "step ms", "TFLOP/s", "MFU", "peak GB");
  std::printf("%-26s %10.1f %9.2f %9.1f %6.1f%% %9.2f\n", ("vlm.cpp " + o.precision).c_str(), sps, step_s * 1e3,
              tflops, 100 * tflops / kPeakTflops, static_cast<double>(mem.step_peak_bytes) / 1e9);
  nlohmann::json peers = nlohmann::json::array();
  if (!o.peer_json.empty()) {
    std::ifstream in_peer(o.peer_json);
    if (!in_peer) std::fprintf(stderr, "vlm bench train: cannot read the peer's results %s\n", o.peer_json.c_str());
    std::string line;
    while (std::getline(in_peer, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("samples_per_s")) continue;
      const double psps = j["samples_per_s"].get<double>();
      // The peer's clipping threshold (absent in files written before it had one: no clipping).
      const double peer_clip = j.value("grad_clip", 0.0);
      std::printf("%-26s %10.1f %9.2f %9.1f %6.1f%% %9.2f   ours / peer = %.2fx%s\n",
                  ("pytorch " + j.value("mode", std::string("?"))).c_str(), psps, j.value("step_ms", 0.0),
                  j.value("tflops", 0.0), 100 * j.value("mfu", 0.0), j.value("peak_gb", 0.0), sps / psps,
                  peer_clip == static_cast<double>(o.grad_clip) ? ""
                                                                : "   (the peer's gradient clipping differs from ours)");
      peers.push_back(j);
    }
  }
  const nlohmann::json breakdown = print_breakdown(times, o.profile_steps, profiled_step_s, step_s);
  std::printf("%s", trace.text.c_str());
  std::printf("\nhost enqueue %.2f ms per step (device step %.2f ms): %s\n", enqueue.host_ms, enqueue.device_ms,
              enqueue.host_ms < 0.9 * enqueue.device_ms ? "the host runs ahead of the device"
                                                        : "the device waits for the host (launch-bound), or the step "
                                                          "waits for the device");
  std::printf("\nmemory (one step): %s\n", mem.summary().c_str());
  std::printf("model FLOPs per sample: %.2f GFLOP (training; the peer's formula)\n", flops / 1e9);
  if (!o.json_out.empty()) {
    std::ofstream out(o.json_out);
    const nlohmann::json j_enqueue = {{"host_enqueue_ms", enqueue.host_ms}, {"device_step_ms", enqueue.device_ms}};
    out << nlohmann::json({{"ours", ours},
                           {"peers", peers},
                           {"breakdown", breakdown},
                           {"enqueue", j_enqueue},
                           {"kernel_trace", trace.json}})
               .dump(2)
        << "\n";
  }
  return 0;
}

}  // namespace vlm::bench
