// Rewrites webdataset shards keeping a subset of their samples: the step `vlm data dedup --rewrite` and
// `vlm data filter` share. Each input shard is read in order and written to <out_dir>/<its file name> (atomically,
// through TarWriter's temp file), holding only the samples the keep function accepts, every field byte for byte
// (members named KEY.FIELD, fields in name order). Shards that keep no sample are not written. A shard that breaks
// midway keeps the samples before the break (its output is still written) and its error is reported; a shard that
// cannot be opened is reported and skipped. Output names must be distinct and must not overwrite an input.
// Shards are processed in parallel on the given pool: `keep` is called from several threads at once (for
// different shards; in order within one shard) and must be thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "data/io/webdataset.h"

namespace vlm {

// `shard` indexes the job's shard list.
using KeepSampleFn = std::function<bool(uint32_t shard, const WebDatasetSample& sample)>;

struct SubsetRewriteStats {
  uint64_t shards_written = 0, shards_empty = 0, shards_failed = 0;
  uint64_t samples_kept = 0, samples_dropped = 0, samples_skipped = 0;  // skipped: malformed, dropped by the reader
  uint64_t unsafe_members = 0;  // tar members the reader skipped for an absolute or '..' name (not copied)
  uint64_t bytes_written = 0;
  std::vector<std::string> errors;        // the first few
  std::vector<std::string> written;       // output shard paths, in input order
};

// The output path of every shard in `which` (out_dir / file name); invalid_argument when two coincide or one is an
// input shard.
Expected<std::vector<std::string>> subset_output_paths(const std::vector<std::string>& shards,
                                                       const std::vector<uint32_t>& which, const std::string& out_dir);

// Rewrites shards[which[i]] for every i. Creates out_dir. Fails only for setup problems (paths, out_dir); data
// problems are counted in the stats.
Expected<SubsetRewriteStats> rewrite_shard_subset(const std::vector<std::string>& shards,
                                                  const std::vector<uint32_t>& which, const std::string& out_dir,
                                                  const KeepSampleFn& keep, ThreadPool& pool);

}  // namespace vlm
