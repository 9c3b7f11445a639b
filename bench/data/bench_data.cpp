// `vlm bench data` (see bench_data.h). All images are read into memory first, so only decode + resize (+ normalize,
// + tokenize) is timed, never I/O. Each figure is the best of --repeats passes over all images (the machine is
// shared; the best pass is the least disturbed one), in wall time and in CPU time (process CPU seconds, which
// other processes on a loaded machine do not inflate; the peer reports the same two); the load average before and
// after is printed beside them. The ratios to Pillow are given for both.
#include "bench/data/bench_data.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <time.h>

#include "bench/bench_options.h"
#include "bench/data/bench_loader.h"
#include "bench/data/bench_shards.h"
#include "data/image/image_pipeline.h"
#include "data/tokenizer/tokenizer.h"
#include "track/progress.h"

namespace vlm::bench {
namespace {

struct Options {
  std::vector<std::string> shards;
  BenchShardOptions gen;
  std::string out_dir;
  int size = 224, repeats = 5;
  std::string mode = "center_crop", filter = "bicubic", tokenizer, json_out;
  std::vector<int> threads{1, 2};
  std::string python = "/usr/bin/python3", peer_script;  // default: default_peer_script()
  bool run_peer = true, regenerate = false;
  bool loader = false;        // --loader: the training loader instead (bench_loader.h)
  LoaderBenchOptions loader_opts;
};

using OptionSpec = bench::OptionSpec<Options>;

bool parse_int(const std::string& s, int* out, int lo = 1) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < lo || v > 1'000'000) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parse_positive(const std::string& s, double* out) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(v > 0.0) || v > 1e9) return false;
  *out = v;
  return true;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

const std::vector<OptionSpec>& option_specs() {
  static const std::vector<OptionSpec> specs = {
      {"--shards", "comma list of webdataset tar shards to read (default: generate one, see --photos)",
       [](Options& o, const std::string& v) { return !(o.shards = split(v)).empty(); }, nullptr},
      {"--photos", "folder of photos to cut the generated images from (default: render images)",
       [](Options& o, const std::string& v) { return !(o.gen.photos_dir = v).empty(); }, nullptr},
      {"--images", "images in the generated shard (default 512)",
       [](Options& o, const std::string& v) { return parse_int(v, &o.gen.n_images); }, nullptr},
      {"--min-side", "shortest longer side of a generated image (default 256)",
       [](Options& o, const std::string& v) { return parse_int(v, &o.gen.min_side, 16); }, nullptr},
      {"--max-side", "longest longer side of a generated image (default 512)",
       [](Options& o, const std::string& v) { return parse_int(v, &o.gen.max_side, 16); }, nullptr},
      {"--quality", "JPEG quality of the generated images (default 90)",
       [](Options& o, const std::string& v) { return parse_int(v, &o.gen.quality) && o.gen.quality <= 100; },
       nullptr},
      {"--out", "folder for the generated shard (default $TMPDIR or /tmp, + vlm_bench_data)",
       [](Options& o, const std::string& v) { return !(o.out_dir = v).empty(); }, nullptr},
      {"--regenerate", "write the shard even if it exists", nullptr, [](Options& o) { o.regenerate = true; }},
      {"--size", "output side S (default 224)", [](Options& o, const std::string& v) { return parse_int(v, &o.size); },
       nullptr},
      {"--mode", "center_crop, border_pad or random_resized_crop (default center_crop)",
       [](Options& o, const std::string& v) { return parse_image_resize_mode(o.mode = v).ok(); }, nullptr},
      {"--filter", "bicubic or bilinear (default bicubic)",
       [](Options& o, const std::string& v) { return (o.filter = v) == "bicubic" || v == "bilinear"; }, nullptr},
      {"--tokenizer", "tokenizer.json: also tokenize each caption (ours only)",
       [](Options& o, const std::string& v) { return !(o.tokenizer = v).empty(); }, nullptr},
      {"--threads", "comma list of thread counts for our scaling runs (default 1,2); --loader: data.decode_threads",
       [](Options& o, const std::string& v) {
         o.threads.clear();
         for (const std::string& t : split(v)) {
           int n = 0;
           if (!parse_int(t, &n, 0) || n > 256) return false;
           o.threads.push_back(n);
         }
         return !o.threads.empty();
       },
       nullptr},
      {"--repeats", "timed passes per figure, best taken (default 5)",
       [](Options& o, const std::string& v) { return parse_int(v, &o.repeats); }, nullptr},
      {"--python", "python with Pillow for the peer (default /usr/bin/python3)",
       [](Options& o, const std::string& v) { return !(o.python = v).empty(); }, nullptr},
      {"--peer-script", "the peer (default bench/peers/data_pillow.py of the source tree)",
       [](Options& o, const std::string& v) { return !(o.peer_script = v).empty(); }, nullptr},
      {"--no-peer", "do not run Pillow", nullptr, [](Options& o) { o.run_peer = false; }},
      {"--json-out", "also write every figure to this JSON file",
       [](Options& o, const std::string& v) { return !(o.json_out = v).empty(); }, nullptr},
      {"--loader", "measure the training loader (VlmBatchLoader) at the nanoVLM-222M shape instead", nullptr,
       [](Options& o) { o.loader = true; }},
      {"--loader-shards", "--loader: shards to generate, --images each (default 4)",
       [](Options& o, const std::string& v) { return parse_int(v, &o.loader_opts.n_shards); }, nullptr},
      {"--batches", "--loader: timed batches per thread count, after a warm-up batch (default 30)",
       [](Options& o, const std::string& v) { return parse_int(v, &o.loader_opts.batches); }, nullptr},
      {"--batch", "--loader: batch size (default 64)",
       [](Options& o, const std::string& v) { return parse_int(v, &o.loader_opts.batch_size); }, nullptr},
      {"--image-tokens", "--loader: image tokens per sample (default 49)",
       [](Options& o, const std::string& v) { return parse_int(v, &o.loader_opts.image_tokens); }, nullptr},
      {"--text-tokens", "--loader: text tokens per sample at most (default 128)",
       [](Options& o, const std::string& v) { return parse_int(v, &o.loader_opts.text_tokens); }, nullptr},
      {"--prefetch", "--loader: data.prefetch_batches (default 2)",
       [](Options& o, const std::string& v) { return parse_int(v, &o.loader_opts.prefetch, 0); }, nullptr},
      {"--consume", "--loader: samples/s the training step consumes (default 1026: torch.compile, nanoVLM-222M)",
       [](Options& o, const std::string& v) {
         o.loader_opts.consume_given = true;
         return parse_positive(v, &o.loader_opts.consume);
       },
       nullptr},
      {"--pace", "--loader: also drain at this multiple of --consume and report the stall (default 2; 0: off)",
       [](Options& o, const std::string& v) {
         if (v == "0") return (o.loader_opts.pace = 0.0) == 0.0;
         return parse_positive(v, &o.loader_opts.pace);
       },
       nullptr},
  };
  return specs;
}

// bench/peers/data_pillow.py under the working directory, else under the source tree this was built from.
std::string default_peer_script() {
  const std::string rel = "bench/peers/data_pillow.py";
  if (std::ifstream(rel).good()) return rel;
  return str(VLM_SOURCE_DIR, "/", rel);
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

double load_average() {
  double l[1] = {-1.0};
  return getloadavg(l, 1) == 1 ? l[0] : -1.0;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Timing {
  double wall = 1e300, cpu = 1e300;  // seconds; cpu = CPU time of all the process's threads
};

// Best (smallest) wall and CPU times of `repeats` runs of `pass`; `after_each` (untimed) follows every run.
Timing best_of(int repeats, const std::function<void()>& pass, const std::function<void()>& after_each) {
  Timing best;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = process_cpu_seconds();
    pass();
    best.cpu = std::min(best.cpu, process_cpu_seconds() - c0);
    best.wall = std::min(best.wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    after_each();
  }
  return best;
}

struct Figure {
  std::string name;
  int threads = 1;
  Timing time;
  size_t images = 0;
  double ms_per_image() const { return 1e3 * time.wall / static_cast<double>(images) * threads; }  // per core
  double cpu_ms_per_image() const { return 1e3 * time.cpu / static_cast<double>(images); }
  double per_s() const { return static_cast<double>(images) / time.wall; }
  double per_s_per_core() const { return per_s() / threads; }
};

struct Run {
  const std::vector<BenchSample>& samples;
  ImagePipelineOptions pipe;
  const Tokenizer* tokenizer = nullptr;
  std::atomic<uint64_t> failures{0}, tokens{0}, passes{0};  // tokens summed over all pipeline passes

  // The whole pipeline (and tokenization) over every sample with `threads` threads (sample i on thread i % T).
  void pipeline_pass(int threads, bool dct, bool region_decode = true) {
    ImagePipelineOptions o = pipe;
    o.dct_scaling = dct;
    o.region_decode = region_decode;
    ++passes;
    const auto work = [&](int t) {
      std::vector<float> out(static_cast<size_t>(3) * o.size * o.size);
      for (size_t i = static_cast<size_t>(t); i < samples.size(); i += static_cast<size_t>(threads)) {
        Philox rng(7, i);
        const BenchSample& s = samples[i];
        if (!image_pipeline_run(s.image.data(), s.image.size(), o, &rng, out.data()).ok()) ++failures;
        if (tokenizer) tokens += tokenizer->encode(s.caption).size();
      }
    };
    if (threads == 1) return work(0);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
    for (auto& th : pool) th.join();
  }
};

Expected<nlohmann::json> run_peer(const Options& o, const std::vector<std::string>& shards) {
  const char* peer_mode = o.mode == "center_crop" ? "center_crop" : o.mode.rfind("border", 0) == 0 ? "border" : "rrc";
  const std::string cmd = quote(o.python) + " " + quote(o.peer_script) + " --shards " + quote(join(shards)) +
                          " --size " + std::to_string(o.size) + " --filter " + o.filter + " --mode " + peer_mode +
                          " --repeats " + std::to_string(o.repeats) + " --json";
  std::printf("running the peer: %s\n", cmd.c_str());
  std::fflush(stdout);
  std::FILE* p = popen(cmd.c_str(), "r");
  if (!p) return io_error("bench data: cannot start the peer: " + cmd);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  if (rc != 0) return io_error(str("bench data: the peer failed (exit status ", rc, "): ", cmd));
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.contains("plain") || !j.contains("draft"))
    return parse_error("bench data: the peer printed no JSON result: " + out.substr(0, 300));
  return j;
}

}  // namespace

int bench_data_main(int argc, char** argv) {
  Options o;
  if (const int code = parse_bench_options("bench data", argc, argv, option_specs(), 15, o); code >= 0)
    return code;
  if (o.loader) {
    LoaderBenchOptions& lo = o.loader_opts;
    lo.shards = o.shards;
    lo.gen = o.gen;
    lo.out_dir = o.out_dir;
    lo.regenerate = o.regenerate;
    lo.tokenizer = o.tokenizer;
    lo.decode_threads = o.threads;
    lo.image_size = o.size;
    lo.resize_mode = o.mode;
    lo.filter = o.filter;
    lo.json_out = o.json_out;
    return run_loader_bench(lo);
  }
  for (int t : o.threads)
    if (t < 1) {
      std::fprintf(stderr, "bench data: --threads needs counts >= 1 (0 is a decode_threads value of --loader)\n");
      return 2;
    }
  if (o.peer_script.empty()) o.peer_script = default_peer_script();
  const double load_before = load_average();

  // Input: the given shards, or a generated one (kept for later runs).
  std::vector<std::string> shards = o.shards;
  if (shards.empty()) {
    if (o.out_dir.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      o.out_dir = str(tmp && *tmp ? tmp : "/tmp", "/vlm_bench_data");
    }
    const std::string path = str(o.out_dir, "/bench-", o.gen.photos_dir.empty() ? "render" : "photos", "-",
                                 o.gen.n_images, "-", o.gen.min_side, "-", o.gen.max_side, "-q", o.gen.quality, ".tar");
    if (o.regenerate || !std::ifstream(path).good()) {
      std::printf("writing %s ...\n", path.c_str());
      std::fflush(stdout);
      const Status s = write_bench_shard(path, o.gen);
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", s.to_string().c_str());
        return 1;
      }
    }
    shards.push_back(path);
  }
  auto loaded = load_bench_samples(shards);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.status().to_string().c_str());
    return 1;
  }
  const std::vector<BenchSample>& samples = *loaded;
  double mean_w = 0, mean_h = 0, mean_kb = 0;
  for (const BenchSample& s : samples) {
    auto info = read_image_info(s.image.data(), s.image.size());
    if (info.ok()) mean_w += info->width, mean_h += info->height;
    mean_kb += static_cast<double>(s.image.size()) / 1024.0;
  }
  const double n_images = static_cast<double>(samples.size());
  mean_w /= n_images, mean_h /= n_images, mean_kb /= n_images;

  Tokenizer tokenizer;
  if (!o.tokenizer.empty()) {
    auto t = Tokenizer::load(o.tokenizer);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.status().to_string().c_str());
      return 1;
    }
    tokenizer = std::move(*t);
  }

  Run run{samples, {}, o.tokenizer.empty() ? nullptr : &tokenizer};
  run.pipe.size = o.size;
  run.pipe.mode = *parse_image_resize_mode(o.mode);
  run.pipe.filter = o.filter == "bilinear" ? ResizeFilter::bilinear : ResizeFilter::bicubic;
  const std::string what = str(o.size, "x", o.size, " ", image_resize_mode_name(run.pipe.mode), " ", o.filter,
                               ", normalized to float CHW", o.tokenizer.empty() ? "" : ", caption tokenized");
  std::printf("vlm bench data: %zu images from %s\n  mean %.0fx%.0f px, %.1f KB; output %s\n", samples.size(),
              join(shards).c_str(), mean_w, mean_h, mean_kb, what.c_str());
  std::fflush(stdout);

  std::vector<Figure> figures;
  const auto add = [&](const std::string& name, int threads, Timing t) {
    figures.push_back({name, threads, t, samples.size()});
  };
  run.pipeline_pass(1, true);  // warm-up: page in the samples, size the scratch buffers
  // Progress over the timed passes below: 4 figures at one thread (+1 for random resized crop), one per thread count.
  const bool rrc = run.pipe.mode == ImageResizeMode::random_resized_crop;
  const auto multi = std::count_if(o.threads.begin(), o.threads.end(), [](int t) { return t != 1; });
  ProgressLine progress("bench data passes", static_cast<uint64_t>((4 + (rrc ? 1 : 0) + multi) * o.repeats));
  uint64_t passes_done = 0;
  const auto best_of_repeats = [&](const std::function<void()>& pass) {
    return best_of(o.repeats, pass, [&] { progress.update(++passes_done); });
  };
  add("ours: pipeline, DCT-scaled decode", 1, best_of_repeats([&] { run.pipeline_pass(1, true); }));
  add("ours: pipeline, full decode", 1, best_of_repeats([&] { run.pipeline_pass(1, false); }));
  if (rrc)  // what decoding only the crop window saves
    add("ours: pipeline, DCT-scaled, whole image decoded", 1,
        best_of_repeats([&] { run.pipeline_pass(1, true, false); }));
  // Breakdown (1 thread): decode alone, at full size and at the scale the pipeline's hint allows.
  for (bool dct : {false, true}) {
    ImageDecodeOptions d;
    if (dct) d.min_width = d.min_height = o.size;
    add(dct ? "  decode only, DCT-scaled (hint S x S)" : "  decode only, full size", 1, best_of_repeats([&] {
          for (const BenchSample& s : samples)
            if (!decode_image(s.image, "", d).ok()) ++run.failures;
        }));
  }
  for (int t : o.threads) {
    if (t == 1) continue;
    add(str("ours: pipeline, DCT-scaled decode, ", t, " threads"), t,
        best_of_repeats([&] { run.pipeline_pass(t, true); }));
  }
  progress.finish(passes_done);
  if (run.failures.load() != 0) {
    std::fprintf(stderr, "bench data: %llu images failed in our pipeline\n",
                 static_cast<unsigned long long>(run.failures.load()));
    return 1;
  }

  nlohmann::json peer;
  if (o.run_peer) {
    auto p = run_peer(o, shards);
    if (!p.ok()) {
      std::fprintf(stderr, "%s\n", p.status().to_string().c_str());
      return 1;
    }
    peer = std::move(*p);
  }
  const double load_after = load_average();
  // Pillow's wall and CPU milliseconds per image, plain and with draft().
  const auto peer_ms = [&](const char* k, const char* field) {
    return peer.is_null() || !peer[k].contains(field) ? 0.0 : peer[k][field].get<double>();
  };
  const double p_wall = peer_ms("plain", "ms_per_image"), p_cpu = peer_ms("plain", "cpu_ms_per_image");
  const double d_wall = peer_ms("draft", "ms_per_image"), d_cpu = peer_ms("draft", "cpu_ms_per_image");

  std::printf("\n%-46s %8s %8s %11s %17s %17s\n", "", "ms/img", "cpu ms", "img/s/core", "vs Pillow",
              "vs Pillow+draft");
  std::printf("%-46s %8s %8s %11s %17s %17s\n", "", "(wall)", "/img", "(wall)", "(wall, cpu)", "(wall, cpu)");
  for (const Figure& f : figures) {
    std::printf("%-46s %8.3f %8.3f %11.0f", f.name.c_str(), f.ms_per_image(), f.cpu_ms_per_image(),
                f.per_s_per_core());
    if (p_wall > 0 && f.name.rfind("ours", 0) == 0)
      std::printf("    %5.2fx, %5.2fx    %5.2fx, %5.2fx", p_wall / f.ms_per_image(), p_cpu / f.cpu_ms_per_image(),
                  d_wall / f.ms_per_image(), d_cpu / f.cpu_ms_per_image());
    if (f.threads > 1) std::printf("   (%.0f img/s total, %.2fx of 1 thread)", f.per_s(), f.per_s() / figures[0].per_s());
    std::printf("\n");
  }
  if (!peer.is_null()) {
    const std::string v = peer.value("pillow_version", std::string("?"));
    for (const char* k : {"plain", "draft"})
      std::printf("%-46s %8.3f %8.3f %11.0f\n",
                  str("Pillow ", v, k == std::string("draft") ? ": draft() + decode + resize" : ": decode + resize")
                      .c_str(),
                  peer_ms(k, "ms_per_image"), peer_ms(k, "cpu_ms_per_image"), peer[k]["images_per_s"].get<double>());
  }
  std::printf("\n(Pillow: decode + resize + crop/pad to 8-bit pixels; ours does that and normalizes to float.)\n");
  std::printf("load average: %.2f before, %.2f after, on %u hardware threads\n", load_before, load_after,
              std::thread::hardware_concurrency());
  if (run.tokenizer)
    std::printf("caption tokens per pass over the images: %llu\n",
                static_cast<unsigned long long>(run.tokens.load() / std::max<uint64_t>(1, run.passes.load())));

  if (!o.json_out.empty()) {
    nlohmann::json j = {{"images", samples.size()},  {"shards", shards},         {"mean_width", mean_w},
                        {"mean_height", mean_h},      {"mean_kb", mean_kb},       {"output", what},
                        {"load_before", load_before}, {"load_after", load_after}, {"peer", peer}};
    for (const Figure& f : figures)
      j["ours"].push_back({{"name", f.name},
                           {"threads", f.threads},
                           {"ms_per_image_per_core", f.ms_per_image()},
                           {"cpu_ms_per_image", f.cpu_ms_per_image()},
                           {"images_per_s", f.per_s()},
                           {"images_per_s_per_core", f.per_s_per_core()}});
    std::ofstream(o.json_out) << j.dump(1) << "\n";
  }
  return 0;
}

}  // namespace vlm::bench
