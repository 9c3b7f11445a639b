// `vlm data dedup` (exact / pHash / caption-MinHash duplicates: keep-list, report, optional rewrite; spreads over
// the ranks of an mpirun launch) and `vlm data filter` (rewrite shards keeping the samples that pass the filters).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli.h"
#include "commands.h"
#include "data/dedup/dedup_job.h"
#include "data/dedup/filter_job.h"
#include "data/io/shard_spec.h"
#include "dist/communicator.h"
#include "track/progress.h"

namespace vlm::cli {
namespace {

int fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
  return 1;
}
int usage_error(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 2;
}

// A number flag given as text ("" = absent). False when the text is not a whole number.
bool parse_number(const std::string& text, double& out) {
  if (text.empty()) return true;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return end && *end == '\0';
}

}  // namespace

int data_dedup(int argc, char** argv, int first) {
  std::string shards, out, caption_jaccard_text, clustering = "transitive";
  int64_t phash_distance = -1, threads = 0, num_perm = 128, max_examples = 10;
  bool exact = false, rewrite = false, drop_bad = false;
  Flags f("vlm data dedup --shards SPEC --out DIR [--exact] [--phash-distance K] [--caption-jaccard T] [--rewrite]",
          "Find duplicate samples in webdataset shards: byte-identical images (--exact), perceptually equal images "
          "(pHash within K bits: re-encoded, resized, lightly cropped or brightened copies; 8-10 is a good K), "
          "near-duplicate captions (MinHash Jaccard >= T). Clusters keep their first sample (--cluster star: a "
          "sample is dropped only when it matches an earlier kept one, so matches do not chain). Writes "
          "DIR/keep.jsonl, DIR/removed.jsonl, DIR/report.json, DIR/report.txt and, with --rewrite, DIR/shards/*.tar without the "
          "duplicates. Under `mpirun -np N` each rank hashes a share of the shards and rank 0 clusters; the result "
          "is the same as one process's. Exact matching is on when --exact is given or no other criterion is.");
  f.add_string("--shards", &shards, "shard spec (folder, brace pattern, @list.txt)");
  f.add_string("--out", &out, "output folder for the lists, the report and rewritten shards");
  f.add_bool("--exact", &exact, "drop byte-identical images");
  f.add_int("--phash-distance", &phash_distance, "drop images whose pHash is within this Hamming distance (0..32)");
  f.add_string("--caption-jaccard", &caption_jaccard_text, "drop samples whose caption MinHash Jaccard >= this (0..1]");
  f.add_string("--cluster", &clustering, "transitive (union of all matches) or star (matches to kept samples only)");
  f.add_bool("--rewrite", &rewrite, "write DIR/shards/ without the duplicates");
  f.add_bool("--drop-bad", &drop_bad, "also drop samples whose image does not decode (needs --phash-distance)");
  f.add_int("--threads", &threads, "hashing workers besides the main thread (per rank)");
  f.add_int("--num-perm", &num_perm, "MinHash slots per caption");
  f.add_int("--max-examples", &max_examples, "clusters and bad images listed in the report");
  f.require("--shards");
  f.require("--out");
  if (int code = parse_command_flags(f, argc, argv, first); code >= 0) return code;
  double caption_jaccard = 0;
  if (!parse_number(caption_jaccard_text, caption_jaccard))
    return usage_error("--caption-jaccard: '" + caption_jaccard_text + "' is not a number");
  if (caption_jaccard_text.size() && !(caption_jaccard > 0 && caption_jaccard <= 1))
    return usage_error("--caption-jaccard must be in (0, 1]");
  if (phash_distance < -1 || phash_distance > 32) return usage_error("--phash-distance must be in [0, 32]");
  auto cluster_mode = parse_dedup_clustering(clustering);
  if (!cluster_mode.ok()) return usage_error("--cluster: " + cluster_mode.status().message());
  if (threads < 0 || num_perm < 1 || num_perm > 4096 || max_examples < 0)
    return usage_error("--threads >= 0, --num-perm in [1, 4096], --max-examples >= 0");

  auto launch = dist::launch_info_from_env();
  if (!launch.ok()) return fail(launch.status());
  auto world = dist::make_communicator(*launch);  // a world of one unless launched by mpirun / srun
  if (!world.ok()) return fail(world.status());
  auto list = expand_shard_spec(shards);
  if (!list.ok()) return fail(list.status());
  DedupJobOptions o;
  o.shards = std::move(*list);
  o.out_dir = out;
  o.criteria.phash_distance = static_cast<int>(phash_distance);
  o.criteria.caption_jaccard = caption_jaccard;
  o.criteria.exact = exact || (phash_distance < 0 && caption_jaccard <= 0);
  o.criteria.drop_bad_images = drop_bad;
  o.criteria.clustering = *cluster_mode;
  o.num_perm = static_cast<int>(num_perm);
  o.threads = static_cast<int>(threads);
  o.rewrite = rewrite;
  o.max_examples = static_cast<size_t>(max_examples);
  const std::string label = (*world)->size() > 1 ? "dedup [rank " + std::to_string((*world)->rank()) + "]" : "dedup";
  ProgressLine progress(label, 0);
  uint64_t samples_done = 0;
  const size_t my_shards = (o.shards.size() + static_cast<size_t>((*world)->size()) - 1 -
                            static_cast<size_t>((*world)->rank())) / static_cast<size_t>((*world)->size());
  o.progress = [&](uint64_t samples, uint64_t shards_done) {
    samples_done = samples;
    progress.update(samples, "shards " + std::to_string(shards_done) + "/" + std::to_string(my_shards));
  };
  auto summary = run_dedup_job(o, **world);
  if (!summary.ok()) return fail(summary.status());
  progress.finish(samples_done, "hashed");
  if ((*world)->rank() == 0) {
    std::printf("%s", summary->report_text.c_str());
    std::printf("wrote %s/keep.jsonl, removed.jsonl, report.json, report.txt%s\n", out.c_str(),
                rewrite ? (", " + std::to_string(summary->rewrite.shards_written) + " shards in " + out + "/shards").c_str()
                        : "");
  }
  return 0;
}

int data_filter(int argc, char** argv, int first) {
  std::string shards, out, max_aspect_text;
  std::vector<std::string> where;
  int64_t min_size = 0, max_size = 0, min_caption = 0, max_caption = 0, threads = 0;
  bool require_caption = false, keep_missing = false;
  Flags f("vlm data filter --shards SPEC --out DIR [--min-size N] [--max-aspect R] [--min-caption-chars N] "
          "[--where 'similarity>=0.28'] ...",
          "Rewrite webdataset shards keeping the samples that pass every filter (checked from the image header and "
          "the caption / json, no pixel decoding), with a counter per rejection reason. Shards keep their names in "
          "DIR; DIR/filter_report.json holds the counters and example keys.");
  f.add_string("--shards", &shards, "shard spec (folder, brace pattern, @list.txt)");
  f.add_string("--out", &out, "output folder for the filtered shards");
  f.add_int("--min-size", &min_size, "minimum image width and height in pixels");
  f.add_int("--max-size", &max_size, "maximum image width and height in pixels (0 = none)");
  f.add_string("--max-aspect", &max_aspect_text, "maximum long side / short side (e.g. 3)");
  f.add_bool("--require-caption", &require_caption, "drop samples without a caption");
  f.add_int("--min-caption-chars", &min_caption, "minimum cleaned caption length in characters");
  f.add_int("--max-caption-chars", &max_caption, "maximum cleaned caption length (0 = none)");
  f.add_multi("--where", &where, "json metadata rule 'field op value' (op: < <= > >= == !=), repeatable");
  f.add_bool("--keep-missing", &keep_missing, "a --where field absent from a sample's json passes (default: fails)");
  f.add_int("--threads", &threads, "shard workers besides the main thread");
  f.require("--shards");
  f.require("--out");
  if (int code = parse_command_flags(f, argc, argv, first); code >= 0) return code;
  FilterJobOptions o;
  double max_aspect = 0;
  if (!parse_number(max_aspect_text, max_aspect)) return usage_error("--max-aspect: '" + max_aspect_text + "' is not a number");
  if (min_size < 0 || max_size < 0 || min_caption < 0 || max_caption < 0 || threads < 0)
    return usage_error("--min-size, --max-size, --min-caption-chars, --max-caption-chars and --threads must be >= 0");
  o.config.min_width = o.config.min_height = static_cast<int>(min_size);
  o.config.max_width = o.config.max_height = static_cast<int>(max_size);
  o.config.max_aspect_ratio = max_aspect;
  o.config.require_caption = require_caption || min_caption > 0;
  o.config.min_caption_chars = static_cast<int>(min_caption);
  o.config.max_caption_chars = static_cast<int>(max_caption);
  o.config.missing_field_fails = !keep_missing;
  for (const auto& w : where)
    if (Status s = add_where_rule(o.config, w); !s.ok()) return usage_error("--where: " + s.message());
  if (Status s = o.config.validate(); !s.ok()) return usage_error(s.message());
  auto list = expand_shard_spec(shards);
  if (!list.ok()) return fail(list.status());
  o.shards = std::move(*list);
  o.out_dir = out;
  o.threads = static_cast<int>(threads);
  ProgressLine progress("filter", 0);
  o.progress = [&](uint64_t n) { progress.update(n); };
  auto report = run_filter_job(o);
  if (!report.ok()) return fail(report.status());
  progress.finish(report->counters.total());
  std::printf("%s", report->to_text().c_str());
  return 0;
}

}  // namespace vlm::cli
