// `vlm bench decode` (see bench_decode.h). Each measured run starts a fresh engine (empty caches), adds every
// request at once and steps until all are answered; the wall time covers prefill and decode, as the peers' does.
// A smaller untimed run first warms up kernels and GEMM choices, and each measured engine captures the CUDA graphs
// of its decode steps before the clock starts (as vLLM does at start-up; the peer's time excludes its
// torch.compile): the capture's cost is printed beside the run's figures instead of hiding in them.
#include "bench/decode/bench_decode.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_options.h"
#include "bench/train/kernel_trace_report.h"
#include "core/device.h"
#include "core/philox.h"
#include "infer/engine.h"
#include "infer/prefix_hash.h"
#include "model/vlm.h"

namespace vlm::bench {
namespace {

struct Options {
  std::string shapes = "text,vlm";
  std::string batches = "1,32,128";
  int prompt = 512, gen = 128, block_size = 16, warmup = 1;
  int max_step_tokens = 8192, max_num_seqs = 256;
  double kv_memory_gb = 0;  // 0: the engine's default (90% of free memory on CUDA)
  std::string device = "auto", dtype = "auto";
  bool same_image = false, cuda_graphs = true;
  int trace = 0;  // decode steps traced per batch after the measured run (0: none)
  std::string peer_json, json_out;
};

bool to_int(const std::string& v, int* out, int lo) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < lo || x > 1 << 30) return false;
  *out = static_cast<int>(x);
  return true;
}

std::vector<int> int_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int v = 0;
    if (!to_int(item, &v, 1)) return {};
    out.push_back(v);
  }
  return out;
}

const std::vector<OptionSpec<Options>>& option_specs() {
  static const std::vector<OptionSpec<Options>> specs = {
      {"--shapes", "text (SmolLM2-135M), vlm (nanoVLM-222M, one image per prompt) or both (default text,vlm)",
       [](Options& o, const std::string& v) { return !(o.shapes = v).empty(); }, nullptr},
      {"--batch", "comma-separated batch sizes (default 1,32,128)",
       [](Options& o, const std::string& v) { return !int_list(o.batches = v).empty(); }, nullptr},
      {"--prompt", "prompt tokens per request, image tokens included (default 512)",
       [](Options& o, const std::string& v) { return to_int(v, &o.prompt, 2); }, nullptr},
      {"--gen", "tokens generated per request (default 128)",
       [](Options& o, const std::string& v) { return to_int(v, &o.gen, 1); }, nullptr},
      {"--block-size", "tokens per KV block (default 16)",
       [](Options& o, const std::string& v) { return to_int(v, &o.block_size, 1); }, nullptr},
      {"--max-step-tokens", "rows per engine step (default 8192)",
       [](Options& o, const std::string& v) { return to_int(v, &o.max_step_tokens, 1); }, nullptr},
      {"--max-num-seqs", "sequences running at once at most (default 256)",
       [](Options& o, const std::string& v) { return to_int(v, &o.max_num_seqs, 1); }, nullptr},
      {"--kv-memory-gb", "KV cache size in GB (default: 90% of the free device memory; 1 GiB on the CPU)",
       [](Options& o, const std::string& v) { return (o.kv_memory_gb = std::atof(v.c_str())) > 0; }, nullptr},
      {"--warmup", "untimed warm-up runs before each shape (default 1)",
       [](Options& o, const std::string& v) { return to_int(v, &o.warmup, 0); }, nullptr},
      {"--device", "cuda, cpu or auto (default: cuda when there is one)",
       [](Options& o, const std::string& v) { return !(o.device = v).empty(); }, nullptr},
      {"--dtype", "bf16, f32 or auto (default: bf16 on cuda, f32 on cpu)",
       [](Options& o, const std::string& v) {
         return v == "bf16" || v == "f32" || v == "auto" ? !(o.dtype = v).empty() : false;
       },
       nullptr},
      {"--same-image", "every VLM request shows the same image (exercises the image and prefix caches)", nullptr,
       [](Options& o) { o.same_image = true; }},
      {"--eager", "launch every kernel of a decode step instead of replaying CUDA graphs", nullptr,
       [](Options& o) { o.cuda_graphs = false; }},
      {"--trace", "after each measured run, trace this many decode steps' kernels with CUPTI (default 0: none)",
       [](Options& o, const std::string& v) { return to_int(v, &o.trace, 0); }, nullptr},
      {"--peer", "JSON lines of the PyTorch peers ({\"peer\", \"shape\", \"batch\", \"tok_per_s\", ...})",
       [](Options& o, const std::string& v) { return !(o.peer_json = v).empty(); }, nullptr},
      {"--json", "also write every figure to this JSON lines file",
       [](Options& o, const std::string& v) { return !(o.json_out = v).empty(); }, nullptr},
  };
  return specs;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

// `batch` requests of `prompt` tokens: for the VLM shape the image's placeholders, then random text.
std::vector<infer::Request> make_requests(const ModelConfig& c, bool vlm, int batch, const Options& o,
                                          int32_t image_token, uint64_t seed) {
  Philox rng(seed, 0);
  const int per_image = c.image_tokens();
  const int64_t S = c.vision.image_size;
  std::vector<infer::Request> out;
  Tensor shared;
  for (int b = 0; b < batch; ++b) {
    infer::Request r;
    r.id = std::to_string(b);
    if (vlm) {
      r.prompt.assign(static_cast<size_t>(per_image), image_token);
      if (!shared.defined() || !o.same_image) {
        shared = Tensor::empty({3, S, S}, DType::f32);
        for (int64_t i = 0; i < shared.numel(); ++i) shared.data<float>()[i] = rng.normal();
      }
      const std::string key = o.same_image ? "image" : "image" + std::to_string(b) + "/" + std::to_string(seed);
      r.images.push_back({shared, infer::image_key(key, "bench")});
    }
    // Text ids below the placeholder, the vocabulary's last id.
    while (static_cast<int>(r.prompt.size()) < o.prompt)
      r.prompt.push_back(static_cast<int32_t>(rng.uniform_int(static_cast<uint64_t>(image_token))));
    r.sampling.max_tokens = o.gen;  // no stop ids: every request generates exactly `gen` tokens
    out.push_back(std::move(r));
  }
  return out;
}

struct RunResult {
  double wall_s = 0, tok_per_s = 0, ttft_p50_ms = 0, ttft_max_ms = 0, itl_p50_ms = 0, itl_p99_ms = 0;
  int64_t generated = 0, kv_bytes = 0, peak_held_bytes = 0, peak_running = 0, fits_at_full_length = 0;
  double peak_unused_fraction = 0;  // slots of held blocks holding no token, at the step where most blocks were held
  double prefix_hit_rate = 0, image_hit_rate = 0;
  int64_t preemptions = 0, steps = 0, graph_steps = 0;
  infer::DecodeGraphCapture up_front;  // graphs captured before the clock started
  int64_t graphs_in_run = 0;           // graphs the timed run still had to capture (0 unless a bucket was missed)
};

infer::EngineOptions engine_options(const VlmModel& model, const Options& o, int32_t image_token) {
  infer::EngineOptions eo;
  eo.block_size = o.block_size;
  eo.kv_memory = static_cast<int64_t>(o.kv_memory_gb * 1e9);
  eo.max_num_seqs = o.max_num_seqs;
  eo.max_tokens_per_step = o.max_step_tokens;
  eo.max_context = std::max(model.config().text.max_seq_len, o.prompt + o.gen);
  eo.image_token_id = image_token;
  eo.cuda_graphs = o.cuda_graphs;
  return eo;
}

// Captures the decode graphs a run of `batch` requests of o.prompt + o.gen tokens can replay: every batch bucket
// up to the running sequences (with chunked prefill the first requests finish first, so the tail decodes fewer
// rows) by the context buckets of its decode steps (contexts prompt + 1 to prompt + gen - 1).
infer::DecodeGraphCapture capture_run_graphs(infer::Engine& engine, int batch, const Options& o) {
  if (o.gen < 2) return {};  // no decode step
  const int rows = std::min(batch, o.max_num_seqs);
  const Expected<infer::DecodeGraphCapture> c =
      engine.capture_decode_graphs(infer::decode_batch_buckets(rows), o.prompt + 1, o.prompt + o.gen - 1);
  if (!c.ok()) {
    std::fprintf(stderr, "vlm bench decode: %s\n", c.status().message().c_str());
    std::exit(1);
  }
  return *c;
}

// The kernels of `o.trace` decode steps at `batch`: a fresh engine (its graphs captured up front) runs untraced
// until a step computed decode rows only with no request waiting (infer::decoding_only), then the traced steps.
std::string trace_decode(VlmModel& model, bool vlm, int batch, const Options& o, int32_t image_token) {
  infer::Engine engine(model, engine_options(model, o, image_token));
  capture_run_graphs(engine, batch, o);
  for (infer::Request& q : make_requests(model.config(), vlm, batch, o, image_token, 7)) engine.add_request(std::move(q));
  bool decoding = false;
  while (!decoding && engine.has_unfinished()) {
    const infer::EngineStats before = engine.stats();
    engine.step();
    decoding = infer::decoding_only(before, engine.stats());
  }
  if (!decoding) return "      (no decode-only step to trace: every request finished during the prefill)\n";
  return trace_kernels(o.trace, [&] { engine.step(); }, 25).text;
}

// The mean fraction of held KV slots that hold no token, over the steps of a run like run_once's (the same requests,
// untimed: the full stats() every step is not free). Scheduling does not depend on the device or the timing, so it
// is the timed run's, step for step.
double mean_unused_fraction(VlmModel& model, bool vlm, int batch, const Options& o, int32_t image_token, uint64_t seed) {
  infer::Engine engine(model, engine_options(model, o, image_token));
  for (infer::Request& q : make_requests(model.config(), vlm, batch, o, image_token, seed)) engine.add_request(std::move(q));
  double unused = 0, held = 0;
  while (engine.has_unfinished()) {
    engine.step();
    const infer::EngineStats s = engine.stats();
    unused += static_cast<double>(s.waste_slots);
    held += static_cast<double>(engine.blocks_in_use()) * o.block_size;
  }
  return held > 0 ? unused / held : 0;
}

RunResult run_once(VlmModel& model, bool vlm, int batch, const Options& o, int32_t image_token, uint64_t seed) {
  infer::Engine engine(model, engine_options(model, o, image_token));
  std::vector<infer::Request> reqs = make_requests(model.config(), vlm, batch, o, image_token, seed);
  RunResult r;
  const int64_t blocks_per_seq = (o.prompt + o.gen + o.block_size - 1) / o.block_size;
  r.fits_at_full_length = engine.num_blocks() / blocks_per_seq;
  std::vector<infer::RequestOutput> outs;
  r.up_front = capture_run_graphs(engine, batch, o);
  const double t0 = now();
  for (infer::Request& q : reqs) engine.add_request(std::move(q));
  int64_t peak_held = -1;
  while (engine.has_unfinished()) {
    for (infer::RequestOutput& out : engine.step()) outs.push_back(std::move(out));
    const int64_t used = engine.blocks_in_use();  // the full stats() only at a new peak: it is not free
    if (used > peak_held) {
      peak_held = used;
      const infer::EngineStats s = engine.stats();
      r.peak_unused_fraction = used ? static_cast<double>(s.waste_slots) / (used * o.block_size) : 0;
    }
  }
  r.wall_s = now() - t0;
  const infer::EngineStats s = engine.stats();
  std::vector<double> ttft, itl;
  for (const infer::RequestOutput& out : outs) {
    if (!out.status.ok()) {
      std::fprintf(stderr, "vlm bench decode: request %s failed: %s\n", out.id.c_str(), out.status.message().c_str());
      std::exit(1);
    }
    for (const infer::Completion& c : out.completions) {
      r.generated += static_cast<int64_t>(c.tokens.size());
      ttft.push_back(c.token_times.front() * 1e3);
      for (size_t i = 1; i < c.token_times.size(); ++i) itl.push_back((c.token_times[i] - c.token_times[i - 1]) * 1e3);
    }
  }
  r.tok_per_s = static_cast<double>(r.generated) / r.wall_s;
  r.ttft_p50_ms = percentile(ttft, 0.5);
  r.ttft_max_ms = percentile(ttft, 1.0);
  r.itl_p50_ms = percentile(itl, 0.5);
  r.itl_p99_ms = percentile(itl, 0.99);
  r.kv_bytes = s.kv_bytes;
  r.peak_held_bytes = peak_held * (s.kv_bytes / engine.num_blocks());
  r.peak_running = s.peak_running;
  r.prefix_hit_rate = s.prompt_tokens ? static_cast<double>(s.prefix_hit_tokens) / s.prompt_tokens : 0;
  r.image_hit_rate = s.image_cache_hits + s.image_cache_misses
                         ? static_cast<double>(s.image_cache_hits) / (s.image_cache_hits + s.image_cache_misses)
                         : 0;
  r.preemptions = s.preemptions;
  r.steps = s.steps;
  r.graph_steps = s.graph_steps;
  r.graphs_in_run = s.graphs - r.up_front.graphs;
  return r;
}

}  // namespace

int bench_decode_main(int argc, char** argv) {
  Options o;
  if (int code = parse_bench_options("vlm bench decode", argc, argv, option_specs(), 18, o); code >= 0) return code;
  const Device dev =
      o.device == "cpu" ? Device::cpu() : (o.device == "cuda" || cuda_available() ? Device::cuda(0) : Device::cpu());
  if (dev.is_cuda() && !cuda_available()) {
    std::fprintf(stderr, "vlm bench decode: no CUDA device\n");
    return 1;
  }
  const DType dtype = o.dtype == "f32" ? DType::f32 : (o.dtype == "bf16" || dev.is_cuda() ? DType::bf16 : DType::f32);
  if (dtype == DType::bf16 && dev.is_cpu()) {
    std::fprintf(stderr, "vlm bench decode: bf16 needs a CUDA device\n");
    return 2;
  }
  ModelConfig cfg;
  if (Status s = apply_model_preset("nanovlm-222m", cfg); !s.ok()) {
    std::fprintf(stderr, "vlm bench decode: %s\n", s.message().c_str());
    return 1;
  }
  cfg.text.max_seq_len = std::max(cfg.text.max_seq_len, o.prompt + o.gen);
  VlmModel model(cfg, dev, dtype);
  model.init_weights(1);
  const int32_t image_token = cfg.text.vocab_size - 1;  // random weights: any id serves as the placeholder

  std::vector<nlohmann::json> peers;
  if (!o.peer_json.empty()) {
    std::ifstream in(o.peer_json);
    if (!in) std::fprintf(stderr, "vlm bench decode: cannot read the peers' results %s\n", o.peer_json.c_str());
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.contains("tok_per_s") && j.contains("shape") && j.contains("batch"))
        peers.push_back(j);
    }
  }
  std::ofstream json_out;
  if (!o.json_out.empty()) json_out.open(o.json_out);
  std::printf("vlm bench decode: %s %s, prompt %d + %d generated, KV blocks of %d tokens, decode steps %s\n",
              dev.to_string().c_str(), dtype_name(dtype), o.prompt, o.gen, o.block_size,
              o.cuda_graphs && dev.is_cuda() ? "from CUDA graphs" : "launched eagerly");
  std::printf("%-5s %5s %10s %9s %9s %9s %9s %9s %11s %8s %8s %8s\n", "shape", "batch", "tok/s", "TTFT p50", "TTFT max",
              "ITL p50", "ITL p99", "KV GB", "held GB", "unused", "running", "fits");
  for (const std::string shape : {"text", "vlm"}) {
    if (o.shapes.find(shape) == std::string::npos) continue;
    const bool vlm = shape == "vlm";
    for (int w = 0; w < o.warmup; ++w) {
      Options small = o;
      small.prompt = std::min(o.prompt, 64);
      small.gen = std::min(o.gen, 8);
      run_once(model, vlm, 4, small, image_token, 99);
    }
    for (int batch : int_list(o.batches)) {
      const RunResult r = run_once(model, vlm, batch, o, image_token, static_cast<uint64_t>(batch));
      const double mean_unused = mean_unused_fraction(model, vlm, batch, o, image_token, static_cast<uint64_t>(batch));
      std::printf("%-5s %5d %10.1f %7.1fms %7.1fms %7.2fms %7.2fms %9.3f %11.3f %7.2f%% %8lld %8lld\n", shape.c_str(),
                  batch, r.tok_per_s, r.ttft_p50_ms, r.ttft_max_ms, r.itl_p50_ms, r.itl_p99_ms, r.kv_bytes / 1e9,
                  r.peak_held_bytes / 1e9, 100 * r.peak_unused_fraction, static_cast<long long>(r.peak_running),
                  static_cast<long long>(r.fits_at_full_length));
      std::printf(
          "      cache hits: prefix %.1f%% of prompt tokens, images %.1f%%; %lld steps (%lld from CUDA graphs), %lld "
          "preemptions\n",
          100 * r.prefix_hit_rate, 100 * r.image_hit_rate, static_cast<long long>(r.steps),
          static_cast<long long>(r.graph_steps), static_cast<long long>(r.preemptions));
      std::printf("      KV slots of held blocks holding no token: %.2f%% at the peak, %.2f%% on average over the steps\n",
                  100 * r.peak_unused_fraction, 100 * mean_unused);
      if (o.cuda_graphs && dev.is_cuda())
        std::printf("      CUDA graphs: %lld captured before the timed run in %.3f s (untimed), %lld during it\n",
                    static_cast<long long>(r.up_front.captured), r.up_front.seconds,
                    static_cast<long long>(r.graphs_in_run));
      nlohmann::json ours = {{"peer", "vlm.cpp"},
                             {"shape", shape},
                             {"batch", batch},
                             {"device", dev.to_string()},
                             {"dtype", dtype_name(dtype)},
                             {"prompt", o.prompt},
                             {"gen", o.gen},
                             {"tok_per_s", r.tok_per_s},
                             {"ttft_p50_ms", r.ttft_p50_ms},
                             {"ttft_max_ms", r.ttft_max_ms},
                             {"itl_p50_ms", r.itl_p50_ms},
                             {"itl_p99_ms", r.itl_p99_ms},
                             {"kv_bytes", r.kv_bytes},
                             {"peak_held_kv_bytes", r.peak_held_bytes},
                             {"peak_unused_fraction", r.peak_unused_fraction},
                             {"mean_unused_fraction", mean_unused},
                             {"peak_running", r.peak_running},
                             {"fits_at_full_length", r.fits_at_full_length},
                             {"prefix_hit_rate", r.prefix_hit_rate},
                             {"image_hit_rate", r.image_hit_rate},
                             {"preemptions", r.preemptions},
                             {"cuda_graphs", o.cuda_graphs},
                             {"graph_steps", r.graph_steps},
                             {"graphs_captured", r.up_front.captured},
                             {"graph_capture_s", r.up_front.seconds},
                             {"graphs_captured_in_run", r.graphs_in_run},
                             {"wall_s", r.wall_s}};
      for (const nlohmann::json& p : peers) {
        // The peer names shapes by model (bench/peers/decode_peer.py): smollm2-135m is text, nanovlm-222m is vlm.
        const std::string pshape = p["shape"].is_string() ? p["shape"].get<std::string>() : "";
        const bool same_shape = pshape == shape || (shape == "text" && pshape == "smollm2-135m") ||
                                (shape == "vlm" && pshape == "nanovlm-222m");
        if (!same_shape || p["batch"] != batch || !p["tok_per_s"].is_number()) continue;
        const double ptps = p["tok_per_s"].get<double>();
        const std::string name = p.value("peer", std::string("peer")) + " " + p.value("mode", std::string(""));
        std::printf("      %-28s %10.1f tok/s  TTFT %7.1fms  ITL p50 %6.2fms p99 %6.2fms   ours / peer = %.2fx\n",
                    name.c_str(), ptps, p.value("ttft_ms", 0.0), p.value("itl_p50_ms", 0.0),
                    p.value("itl_p99_ms", 0.0), r.tok_per_s / ptps);
        ours["ratio_" + p.value("mode", p.value("peer", std::string("peer")))] = r.tok_per_s / ptps;
      }
      if (json_out) json_out << ours.dump() << "\n";
      if (o.trace > 0) std::printf("%s", trace_decode(model, vlm, batch, o, image_token).c_str());
    }
  }
  return 0;
}

}  // namespace vlm::bench
