// The `vlm data filter` job as a library call: run filter_sample() (data/loader/filters.h: image header size and
// aspect, caption cleaning and length, img2dataset metadata thresholds and `field op value` rules) on every sample of
// the shards and rewrite them into <out_dir>/<shard name> keeping the passing samples (shard_subset.h, shards in
// parallel on a thread pool), with one counter per rejection reason, a few example keys per reason, and
// <out_dir>/filter_report.json. Bad shards are reported, never fatal.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/dedup/shard_subset.h"
#include "data/loader/filters.h"

namespace vlm {

struct FilterJobOptions {
  std::vector<std::string> shards;
  std::string out_dir;
  FilterConfig config;
  int threads = 0;               // shard workers besides the caller
  size_t examples_per_reason = 3;
  // Samples looked at so far; called from worker threads, one call at a time.
  std::function<void(uint64_t samples)> progress;
};

struct FilterJobReport {
  FilterCounters counters;
  std::array<std::vector<std::string>, kFilterReasonCount> examples;  // "shard key: detail", per reason
  SubsetRewriteStats rewrite;
  double seconds = 0;
  std::string to_text() const;   // counters per reason (non-zero ones), examples, shards written
  std::string to_json() const;
};

// Maps `--where` text to the config: "similarity >= X" -> min_similarity, "punsafe < X" -> max_punsafe,
// "pwatermark < X" -> max_pwatermark, anything else -> a generic json rule. invalid_argument names the text.
Status add_where_rule(FilterConfig& config, const std::string& text);

Expected<FilterJobReport> run_filter_job(const FilterJobOptions& options);

}  // namespace vlm
