// `vlm bench data --loader` (see bench_loader.h). Each run opens a fresh VlmBatchLoader with the given decode
// threads, takes one warm-up batch (thread start, first shard open, page-in), then times `batches` batches drained
// as fast as the loader yields them: samples/s (wall) and CPU seconds per sample (all the process's threads). The
// optional paced drain sleeps batch_size / (pace * consume) seconds per batch, as a training step would, and
// reports the fraction of its time next_batch() blocked.
#include "bench/data/bench_loader.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include <time.h>

#include "data/loader/vlm_batch.h"
#include "data/tokenizer/bpe_trainer.h"
#include "track/progress.h"

namespace vlm::bench {
namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The shards to read: the given ones, or n_shards generated ones (written in parallel, kept for later runs).
Expected<std::vector<std::string>> loader_shards(const LoaderBenchOptions& o) {
  if (!o.shards.empty()) return o.shards;
  std::string dir = o.out_dir;
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    dir = str(tmp && *tmp ? tmp : "/tmp", "/vlm_bench_data");
  }
  std::vector<std::string> paths;
  for (int k = 0; k < o.n_shards; ++k)
    paths.push_back(str(dir, "/loader-", o.gen.photos_dir.empty() ? "render" : "photos", "-", o.gen.n_images, "-",
                        o.gen.min_side, "-", o.gen.max_side, "-q", o.gen.quality, "-", k, ".tar"));
  std::vector<Status> status(paths.size());
  std::vector<std::thread> writers;
  for (size_t k = 0; k < paths.size(); ++k) {
    if (!o.regenerate && std::filesystem::exists(paths[k])) continue;
    std::printf("writing %s ...\n", paths[k].c_str());
    writers.emplace_back([&, k] {
      BenchShardOptions g = o.gen;
      g.seed = o.gen.seed + k;
      // Written under a temporary name: an interrupted run never leaves a short shard behind.
      const std::string tmp = paths[k] + ".partial";
      status[k] = write_bench_shard(tmp, g);
      if (status[k].ok()) {
        std::error_code ec;
        std::filesystem::rename(tmp, paths[k], ec);
        if (ec) status[k] = io_error(str("bench data: cannot rename ", tmp, ": ", ec.message()));
      }
    });
  }
  std::fflush(stdout);
  for (auto& w : writers) w.join();
  for (const Status& s : status) VLM_RETURN_IF_ERROR(s);
  return paths;
}

Expected<Tokenizer> bench_tokenizer(const LoaderBenchOptions& o, const std::vector<BenchSample>& samples,
                                    std::string* what) {
  if (!o.tokenizer.empty()) {
    *what = o.tokenizer;
    return Tokenizer::load(o.tokenizer);
  }
  std::vector<std::string> corpus;
  for (const BenchSample& s : samples) corpus.push_back(s.caption);
  corpus.push_back("describe the image.");
  BpeTrainOptions b;
  b.vocab_size = 4096;
  b.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<pad>"};
  VLM_ASSIGN_OR_RETURN(Tokenizer t, train_bpe(corpus, b));
  *what = str("byte-level BPE trained on the shards' captions (", t.vocab_size(), " ids; --tokenizer for a real one)");
  return t;
}

struct RunResult {
  int decode_threads = 0;
  uint64_t samples = 0, batches = 0;
  double seconds = 0.0, cpu = 0.0;
  LoaderTiming timing;  // of the timed batches
  LoaderCounters counters;
  double paced_wait = 0.0, paced_seconds = 0.0;
  double samples_per_s() const { return static_cast<double>(samples) / seconds; }
};

LoaderTiming minus(const LoaderTiming& a, const LoaderTiming& b) {
  return {a.batches - b.batches, a.wait_s - b.wait_s, a.read_s - b.read_s,
          a.decode_s - b.decode_s, a.pack_s - b.pack_s, a.ahead_s - b.ahead_s};
}

Expected<RunResult> run_one(const VlmDataOptions& base, const Tokenizer& tok, const LoaderBenchOptions& o,
                            int threads) {
  VlmDataOptions d = base;
  d.decode_threads = threads;
  VLM_ASSIGN_OR_RETURN(auto loader, VlmBatchLoader::open(d, tok));
  RunResult r;
  r.decode_threads = threads;
  VLM_RETURN_IF_ERROR(loader->next_batch(o.batch_size).status().with_context("bench data: warm-up batch"));
  const LoaderTiming before = loader->timing();
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = cpu_seconds();
  ProgressLine progress(str("bench data --loader, ", threads, " decode threads: batches"),
                        static_cast<uint64_t>(o.batches) * (o.pace > 0.0 ? 2 : 1));
  for (int b = 0; b < o.batches; ++b) {
    VLM_ASSIGN_OR_RETURN(PackedBatch batch, loader->next_batch(o.batch_size));
    r.samples += static_cast<uint64_t>(batch.n_samples);
    ++r.batches;
    progress.update(r.batches);
  }
  r.seconds = since(t0);
  r.cpu = cpu_seconds() - c0;
  r.timing = minus(loader->timing(), before);
  if (o.pace > 0.0) {
    // A consumer that needs batch_size / (pace * consume) seconds per batch, as a training step would.
    const auto step = std::chrono::duration<double>(o.batch_size / (o.pace * o.consume));
    const LoaderTiming start = loader->timing();
    const auto p0 = std::chrono::steady_clock::now();
    for (int b = 0; b < o.batches; ++b) {
      VLM_RETURN_IF_ERROR(loader->next_batch(o.batch_size).status());
      std::this_thread::sleep_for(step);
      progress.update(static_cast<uint64_t>(o.batches + b + 1));
    }
    r.paced_seconds = since(p0);
    r.paced_wait = loader->timing().wait_s - start.wait_s;
  }
  progress.finish(static_cast<uint64_t>(o.batches) * (o.pace > 0.0 ? 2 : 1));
  r.counters = loader->counters();
  return r;
}

}  // namespace

int run_loader_bench(const LoaderBenchOptions& o) {
  auto shards = loader_shards(o);
  if (!shards.ok()) {
    std::fprintf(stderr, "%s\n", shards.status().to_string().c_str());
    return 1;
  }
  auto samples = load_bench_samples(*shards);
  if (!samples.ok()) {
    std::fprintf(stderr, "%s\n", samples.status().to_string().c_str());
    return 1;
  }
  double mean_w = 0, mean_h = 0, mean_kb = 0;
  for (const BenchSample& s : *samples) {
    if (auto info = read_image_info(s.image.data(), s.image.size()); info.ok())
      mean_w += info->width, mean_h += info->height;
    mean_kb += static_cast<double>(s.image.size()) / 1024.0;
  }
  const double n = static_cast<double>(samples->size());
  std::string tok_what;
  auto tok = bench_tokenizer(o, *samples, &tok_what);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
    return 1;
  }

  VlmDataOptions d;
  d.shards = *shards;
  d.task = "caption";
  d.image_size = o.image_size;
  d.resize = o.filter;
  d.resize_mode = o.resize_mode;
  d.image_tokens = o.image_tokens;
  d.max_seq_len = o.image_tokens + o.text_tokens;
  d.epochs = 0;  // forever: the drain may wrap around the data
  d.shuffle_window = 1000;
  d.prefetch_batches = o.prefetch;
  std::printf("vlm bench data --loader: VlmBatchLoader over %zu shard(s), %zu samples, mean %.0fx%.0f px, %.1f KB\n",
              shards->size(), samples->size(), mean_w / n, mean_h / n, mean_kb / n);
  std::printf("  nanoVLM-222M input: %dx%d %s %s, normalized float CHW; caption task, chat template, %d image + up "
              "to %d text tokens, batch %d, prefetch %d, shuffle window %llu\n",
              o.image_size, o.image_size, o.resize_mode.c_str(), o.filter.c_str(), o.image_tokens, o.text_tokens,
              o.batch_size, o.prefetch, static_cast<unsigned long long>(d.shuffle_window));
  std::printf("  tokenizer: %s\n", tok_what.c_str());
  std::printf("  each run: 1 warm-up batch, then %d batches drained as fast as they come; consumption reference %.0f "
              "samples/s (%s)\n",
              o.batches, o.consume,
              o.consume_given ? "--consume"
                              : "default: a torch.compile nanoVLM-222M step on an H200, dev/log/benchmarks.md; "
                                "--consume to change");
  std::printf("  decode threads = data.decode_threads: pool workers; the prefetch thread that builds the batch "
              "decodes too\n\n");
  std::fflush(stdout);

  std::vector<RunResult> results;
  for (int t : o.decode_threads) {
    auto r = run_one(d, *tok, o, t);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().to_string().c_str());
      return 1;
    }
    results.push_back(*r);
  }

  std::printf("%-8s %10s %9s %9s %10s | %-36s | %s\n", "decode", "samples/s", "vs", "cpu ms", "cores",
              "per batch, ms: wait read decode pack", "paced");
  std::printf("%-8s %10s %9s %9s %10s | %-36s | %s\n", "threads", "", str(o.consume, "/s").c_str(), "/sample",
              "busy", "(wait = consumer stall; idle ahead)", str(o.pace, "x consumption: stall").c_str());
  bool ok = true;
  for (const RunResult& r : results) {
    const double nb = static_cast<double>(std::max<uint64_t>(1, r.timing.batches));
    std::printf("%-8d %10.0f %8.2fx %9.3f %10.1f | %6.2f %5.2f %6.2f %5.2f  ahead %6.2f |", r.decode_threads,
                r.samples_per_s(), r.samples_per_s() / o.consume, 1e3 * r.cpu / static_cast<double>(r.samples),
                r.cpu / r.seconds, 1e3 * r.timing.wait_s / nb, 1e3 * r.timing.read_s / nb,
                1e3 * r.timing.decode_s / nb, 1e3 * r.timing.pack_s / nb, 1e3 * r.timing.ahead_s / nb);
    if (o.pace > 0.0) {
      std::printf(" %5.1f%% of %.2f s", 100.0 * r.paced_wait / r.paced_seconds, r.paced_seconds);
    } else {
      std::printf(" -");
    }
    std::printf("\n");
    const LoaderCounters& c = r.counters;
    if (c.samples_skipped != 0 || r.samples == 0) {
      std::fprintf(stderr, "bench data: %llu samples skipped (bad images %llu, bad text %llu), %llu read\n",
                   static_cast<unsigned long long>(c.samples_skipped), static_cast<unsigned long long>(c.bad_images),
                   static_cast<unsigned long long>(c.bad_text), static_cast<unsigned long long>(r.samples));
      ok = false;
    }
  }
  const RunResult& last = results.back();
  std::printf("\nloader counters (last run): slots %llu, ok %llu, skipped %llu, truncated sequences %llu, epochs "
              "completed %llu\n",
              static_cast<unsigned long long>(last.counters.slots),
              static_cast<unsigned long long>(last.counters.samples_ok),
              static_cast<unsigned long long>(last.counters.samples_skipped),
              static_cast<unsigned long long>(last.counters.truncated_sequences),
              static_cast<unsigned long long>(last.counters.epochs_completed));
  std::printf("hardware threads: %u\n", std::thread::hardware_concurrency());

  if (!o.json_out.empty()) {
    nlohmann::json j = {{"shards", *shards},     {"samples", samples->size()}, {"consume", o.consume},
                        {"pace", o.pace},        {"batch_size", o.batch_size}, {"image_size", o.image_size},
                        {"tokenizer", tok_what}, {"hardware_threads", std::thread::hardware_concurrency()}};
    for (const RunResult& r : results)
      j["runs"].push_back({{"decode_threads", r.decode_threads},
                           {"samples", r.samples},
                           {"seconds", r.seconds},
                           {"samples_per_s", r.samples_per_s()},
                           {"ratio_to_consume", r.samples_per_s() / o.consume},
                           {"cpu_seconds", r.cpu},
                           {"wait_s", r.timing.wait_s},
                           {"read_s", r.timing.read_s},
                           {"decode_s", r.timing.decode_s},
                           {"pack_s", r.timing.pack_s},
                           {"ahead_s", r.timing.ahead_s},
                           {"paced_wait_s", r.paced_wait},
                           {"paced_seconds", r.paced_seconds},
                           {"samples_skipped", r.counters.samples_skipped}});
    std::ofstream(o.json_out) << j.dump(1) << "\n";
  }
  return ok ? 0 : 1;
}

}  // namespace vlm::bench
