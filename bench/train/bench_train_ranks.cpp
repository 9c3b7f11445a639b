// `vlm bench train` over the ranks of a launch (see bench_train_ranks.h). A step is the trainer's step with one
// micro-batch: FSDP's zero_grads, begin/end of the micro-batch around forward_backward (units gathered and
// gradients reduce-scattered as the model reaches them), AdamW on this rank's shards with the global gradient norm.
// Timing: `warmup` untimed steps, then `steps` steps between two barriers after device synchronizations; each rank
// times its own steps. One more step measures memory (FSDP's accounting and the allocator's peak). The ranks' figures
// travel to rank 0 through one all_gather of doubles on the communicator's device (NCCL's collectives take GPU
// tensors only).
#include "bench/train/bench_train_ranks.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <optional>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/train/synthetic_batch.h"
#include "core/logging.h"
#include "dist/communicator.h"
#include "dist/launch_env.h"
#include "kernels/ops.h"
#include "train/fsdp.h"
#include "train/memory_report.h"
#include "train/optimizer.h"
#include "train/train_flops.h"

namespace vlm::bench {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The per-rank figures gathered to rank 0, in this order.
enum Field {
  kStepS,
  kLoss,
  kDevicePeak,   // allocator peak bytes in use over the measured step
  kDeviceStart,  // allocator bytes in use when it began
  kMeasured,     // FsdpMemory's seven categories, then the formula's seven
  kFieldCount = kMeasured + 14
};

std::vector<double> memory_fields(const FsdpMemory& m) {
  return {double(m.parameters),        double(m.compute_copies),    double(m.gradients),        double(m.optimizer),
          double(m.gathered_peak),     double(m.grad_buffers_peak), double(m.comm_buffers_peak)};
}
const char* const kMemoryNames[] = {"parameters",           "compute_copies",        "gradients",
                                    "optimizer",            "gathered_weights_peak", "gradient_buffers_peak",
                                    "communication_buffers_peak"};

// Every rank's `mine` (kFieldCount doubles), rank by rank, on every rank.
Expected<std::vector<std::vector<double>>> gather_fields(dist::Communicator& comm, const std::vector<double>& mine) {
  Tensor in = Tensor::from_vector(mine, {kFieldCount}).to(comm.device());
  Tensor all = Tensor::zeros({int64_t{kFieldCount} * comm.size()}, DType::f64, comm.device());
  VLM_RETURN_IF_ERROR(comm.all_gather(all, in));
  const Tensor host = all.to(Device::cpu());
  std::vector<std::vector<double>> out(static_cast<size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r)
    out[static_cast<size_t>(r)].assign(host.data<double>() + int64_t{r} * kFieldCount,
                                       host.data<double>() + int64_t{r + 1} * kFieldCount);
  return out;
}

// The single-rank figure the efficiency is taken against: `vlm bench train --json`'s "ours" (one GPU, no FSDP) or
// a world of one of this benchmark (its "samples_per_s" and "world_size" 1). Per-rank samples/s and the batch.
struct Baseline {
  double samples_per_s = 0;
  int batch = 0;
  std::string what;
};
Expected<Baseline> read_baseline(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("--baseline-json: cannot read " + path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("--baseline-json: " + path + " is not a JSON object");
  Baseline b;
  if (j.contains("ours") && j["ours"].contains("samples_per_s")) {
    b.samples_per_s = j["ours"]["samples_per_s"].get<double>();
    b.batch = j["ours"].value("batch", 0);
    b.what = "one device, no FSDP";
  } else if (j.contains("samples_per_s") && j.value("world_size", 0) == 1) {
    b.samples_per_s = j["samples_per_s"].get<double>();
    b.batch = j.value("batch_per_rank", 0);
    b.what = str("a world of one, fsdp ", j.value("fsdp", std::string("?")));
  } else {
    return invalid_argument("--baseline-json: " + path + " holds neither `vlm bench train --json`'s \"ours\" nor a "
                            "world of one of this benchmark (\"samples_per_s\" with \"world_size\": 1)");
  }
  if (!(b.samples_per_s > 0)) return invalid_argument("--baseline-json: " + path + ": samples_per_s is not positive");
  return b;
}

double mib(double bytes) { return bytes / (1 << 20); }

int fail(const std::string& what) {
  std::fprintf(stderr, "vlm bench train: rank %d: %s\n", log_rank(), what.c_str());
  return 1;
}

}  // namespace

int bench_train_ranks(const TrainRanksOptions& o) {
  const Expected<dist::LaunchInfo> info = dist::launch_info_from_env();
  if (!info.ok()) return fail(info.status().to_string());
  if (info->distributed()) set_log_rank(info->rank);
  const bool gpu = o.device == "cuda";
  if (gpu && !cuda_available()) return fail("--device cuda: no CUDA device (or not a CUDA build)");
  const Device dev = gpu ? Device::cuda(info->local_rank) : Device::cpu();
  // Several GPU ranks talk over NCCL; a world of one and CPU ranks use the CPU communicator (the local one or MPI),
  // as the trainer does.
  Expected<std::unique_ptr<dist::Communicator>> made =
      gpu && info->distributed() ? dist::make_communicator(*info, dev) : dist::make_communicator(*info);
  if (!made.ok()) return fail(made.status().to_string());
  dist::Communicator& comm = **made;
  const int world = comm.size();
  const bool lead = comm.rank() == 0;

  ModelConfig cfg;
  if (Status s = apply_model_preset(o.preset, cfg); !s.ok()) return fail(s.to_string());
  const Expected<FsdpStrategy> strategy = parse_fsdp_strategy(o.fsdp);
  if (!strategy.ok()) return fail("--fsdp: " + strategy.status().to_string());
  const Expected<Recompute> recompute = parse_recompute(o.recompute);
  if (!recompute.ok()) return fail("--recompute: " + recompute.status().to_string());
  std::optional<Baseline> baseline;
  if (!o.baseline_json.empty()) {
    Expected<Baseline> b = read_baseline(o.baseline_json);
    if (!b.ok()) return fail(b.status().to_string());
    baseline = *b;
  }
  const DType dtype = o.precision == "bf16" ? DType::bf16 : DType::f32;
  if (dtype == DType::bf16 && !gpu) return fail("--precision bf16 needs --device cuda (the CPU trains in fp32)");

  VlmModel model(cfg, dev, dtype);
  model.init_weights(1);  // every rank alike, as FSDP expects
  model.set_recompute(*recompute);
  const int64_t n_params = model.params().numel();
  Expected<std::unique_ptr<Fsdp>> fsdp_made =
      Fsdp::create(model, comm, {*strategy, true, o.reduce_dtype == "bf16" ? DType::bf16 : DType::f32});
  if (!fsdp_made.ok()) return fail(fsdp_made.status().to_string());
  Fsdp& fsdp = **fsdp_made;
  ops::AdamWSettings adamw;
  adamw.grad_clip = o.grad_clip;
  AdamW opt(fsdp.optimizer_params(), adamw);
  if (fsdp.sharded()) opt.set_norm_reduction([&](Tensor& norm_sq) { return fsdp.reduce_norm(norm_sq); });
  const VlmInputs in = synthetic_batch(cfg, o.batch, o.text_tokens, dev, 1234 + static_cast<uint64_t>(comm.rank()));
  // The mean over every rank's target tokens, as the trainer scales.
  const float grad_scale = 1.f / static_cast<float>(int64_t{world} * o.batch * o.text_tokens);
  StepLoss last_loss;
  auto step = [&]() -> Status {
    fsdp.zero_grads();
    fsdp.begin_micro_batch(true);
    last_loss = model.forward_backward(in, grad_scale);
    VLM_RETURN_IF_ERROR(fsdp.end_micro_batch());
    opt.step(1e-4f);
    return opt.status();
  };
  auto sync = [&] {
    if (gpu) (void)ops::check_index_errors(dev);  // synchronizes the device
  };
  const int seq = cfg.image_tokens() + o.text_tokens;
  if (lead)
    std::printf("vlm bench train: preset %s (%.1fM parameters), %s, %d rank(s) (%s, %s), fsdp %s, reduce %s, "
                "per rank batch %d x (%d image + %d text tokens), recompute %s\n",
                o.preset.c_str(), static_cast<double>(n_params) / 1e6, o.precision.c_str(), world, comm.backend(),
                dev.to_string().c_str(), o.fsdp.c_str(), o.reduce_dtype.c_str(), o.batch, cfg.image_tokens(),
                o.text_tokens, o.recompute.c_str());

  Status st;
  for (int i = 0; i < o.warmup && st.ok(); ++i) st = step();
  sync();
  if (st.ok()) st = comm.barrier();
  const double t0 = now();
  for (int i = 0; i < o.steps && st.ok(); ++i) st = step();
  sync();
  const double step_s = (now() - t0) / o.steps;
  if (st.ok()) st = comm.barrier();
  if (!st.ok()) {
    fail(st.to_string());
    comm.abort(1);
    return 1;
  }
  const double loss = last_loss.mean();
  StepMemoryMeter meter(dev);
  fsdp.reset_peaks();
  meter.begin();
  st = step();
  sync();
  const MemoryReport mem = meter.end(model.params(), opt.state_bytes(), o.precision);
  if (!st.ok()) {
    fail(st.to_string());
    comm.abort(1);
    return 1;
  }
  std::vector<double> mine(kFieldCount, 0.0);
  mine[kStepS] = step_s;
  mine[kLoss] = loss;
  mine[kDevicePeak] = static_cast<double>(mem.step_peak_bytes);
  mine[kDeviceStart] = static_cast<double>(mem.step_start_bytes);
  const std::vector<double> measured = memory_fields(fsdp.memory(opt.state_bytes()));
  const std::vector<double> formula = memory_fields(fsdp.memory_formula(1));
  for (size_t i = 0; i < 7; ++i) {
    mine[kMeasured + i] = measured[i];
    mine[kMeasured + 7 + i] = formula[i];
  }
  const Expected<std::vector<std::vector<double>>> all = gather_fields(comm, mine);
  if (!all.ok()) {
    fail(all.status().to_string());
    comm.abort(1);
    return 1;
  }
  if (!lead) return 0;

  const double flops = train_flops_per_sample(cfg, o.text_tokens);
  const double peak_tflops = gpu ? device_peak_tflops(dev, dtype) : 0.0;
  std::printf("\n%-6s %10s %12s %9s %9s %9s %13s %12s %12s\n", "rank", "samples/s", "tokens/s", "step ms", "TFLOP/s",
              "loss", "FSDP MiB", "formula MiB", "device peak");
  double total_sps = 0, slowest_s = 0, worst_mem_gap = 0;
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < world; ++r) {
    const std::vector<double>& f = (*all)[static_cast<size_t>(r)];
    const double sps = o.batch / f[kStepS];
    total_sps += sps;
    slowest_s = std::max(slowest_s, f[kStepS]);
    double m_total = 0, f_total = 0;
    nlohmann::json jm, jf;
    for (int i = 0; i < 7; ++i) {
      m_total += f[kMeasured + i];
      f_total += f[kMeasured + 7 + i];
      jm[kMemoryNames[i]] = f[kMeasured + i];
      jf[kMemoryNames[i]] = f[kMeasured + 7 + i];
      if (f[kMeasured + 7 + i] > 0)
        worst_mem_gap = std::max(worst_mem_gap, std::abs(f[kMeasured + i] / f[kMeasured + 7 + i] - 1));
    }
    jm["total"] = m_total;
    jf["total"] = f_total;
    std::printf("%-6d %10.2f %12.0f %9.2f %9.2f %9.4f %13.1f %12.1f %12.1f\n", r, sps, sps * seq, f[kStepS] * 1e3,
                sps * flops / 1e12, f[kLoss], mib(m_total), mib(f_total), mib(f[kDevicePeak]));
    ranks.push_back({{"rank", r},
                     {"samples_per_s", sps},
                     {"tokens_per_s", sps * seq},
                     {"step_ms", f[kStepS] * 1e3},
                     {"tflops", sps * flops / 1e12},
                     {"loss", f[kLoss]},
                     {"peak_gb", f[kDevicePeak] / 1e9},
                     {"step_start_gb", f[kDeviceStart] / 1e9},
                     {"fsdp_memory", jm},
                     {"fsdp_memory_formula", jf}});
  }
  std::printf("%-6s %10.2f %12.0f %9.2f %9.2f\n", "total", total_sps, total_sps * seq, slowest_s * 1e3,
              total_sps * flops / 1e12);
  if (peak_tflops > 0)
    std::printf("MFU %.1f%% (of %.0f TFLOP/s per device)\n", 100 * total_sps * flops / 1e12 / (world * peak_tflops),
                peak_tflops);
  std::printf("FSDP memory: measured against the formula within %.1f%% in every category and rank\n",
              100 * worst_mem_gap);
  nlohmann::json out = {{"impl", "vlm.cpp"},
                        {"preset", o.preset},
                        {"device", gpu ? "cuda" : "cpu"},
                        {"backend", comm.backend()},
                        {"precision", o.precision},
                        {"fsdp", o.fsdp},
                        {"reduce_dtype", o.reduce_dtype},
                        {"recompute", o.recompute},
                        {"world_size", world},
                        {"batch_per_rank", o.batch},
                        {"seq_len", seq},
                        {"parameters", n_params},
                        {"samples_per_s", total_sps},
                        {"tokens_per_s", total_sps * seq},
                        {"step_ms", slowest_s * 1e3},
                        {"gflop_per_sample", flops / 1e9},
                        {"peak_gb_max", 0.0},
                        {"memory_formula_max_rel_gap", worst_mem_gap},
                        {"ranks", ranks}};
  double peak_max = 0;
  for (const auto& r : ranks) peak_max = std::max(peak_max, r["peak_gb"].get<double>());
  out["peak_gb_max"] = peak_max;
  if (peak_tflops > 0) out["mfu"] = total_sps * flops / 1e12 / (world * peak_tflops);
  if (baseline) {
    const double eff = total_sps / (world * baseline->samples_per_s);
    std::printf("weak scaling efficiency: %.1f%% (total %.2f samples/s over %d x %.2f, the baseline's per-rank "
                "samples/s: %s, %s)\n",
                100 * eff, total_sps, world, baseline->samples_per_s, baseline->what.c_str(), o.baseline_json.c_str());
    if (baseline->batch != 0 && baseline->batch != o.batch)
      std::printf("note: the baseline's batch is %d, ours %d per rank: not weak scaling of the same work\n",
                  baseline->batch, o.batch);
    out["baseline_samples_per_s"] = baseline->samples_per_s;
    out["scaling_efficiency"] = eff;
  }
  if (!o.peer_json.empty()) {
    std::ifstream in_peer(o.peer_json);
    if (!in_peer) std::fprintf(stderr, "vlm bench train: cannot read the peer's results %s\n", o.peer_json.c_str());
    std::string line;
    while (std::getline(in_peer, line)) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("tokens_per_s") || j.value("world_size", 0) != world ||
          j.value("preset", std::string()) != o.preset)
        continue;
      const double ptok = j["tokens_per_s"].get<double>();
      std::printf("%-24s %12.0f tokens/s total, peak %.2f GB   ours / peer = %.2fx%s\n",
                  j.value("impl", std::string("peer")).c_str(), ptok, j.value("peak_gb_max", 0.0),
                  total_sps * seq / ptok,
                  j.value("batch_per_rank", 0) == o.batch && j.value("seq_len", 0) == seq
                      ? ""
                      : "   (the peer's batch or sequence differs from ours)");
      out["peer_tokens_per_s"] = ptok;
      out["ratio_to_peer"] = total_sps * seq / ptok;
    }
  }
  if (!o.json_out.empty()) {
    std::ofstream f(o.json_out);
    f << out.dump() << "\n";
    if (!f) return fail("cannot write " + o.json_out);
  }
  return 0;
}

}  // namespace vlm::bench
