// The whole `vlm data dedup` job as a library call: hash every sample of the shards (spread over the ranks of the
// communicator, e.g. an mpirun launch: rank r hashes shards r, r + size, ...; then the records are gathered to rank 0
// and put back in shard list order, so the result is the same for any number of ranks), cluster on rank 0, write
//   <out>/keep.jsonl      one {"shard": ..., "key": ...} per kept sample, in shard order
//   <out>/removed.jsonl   per dropped sample: shard, key, kind, duplicate_of(_shard) (the kept sample of its
//                         cluster), matched(_shard) (its strongest pair's other end), phash_distance or
//                         caption_jaccard of that pair
//   <out>/report.json     counts per kind, cluster size histogram, the largest clusters, bad images, index stats
//   <out>/report.txt      the same as a short readable summary
// and, with `rewrite`, <out>/shards/<name>.tar without the dropped samples (each rank rewrites the shards it
// hashed). Bad shards and corrupt images are counted and reported, never fatal.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/dedup/dedup_cluster.h"
#include "data/dedup/sample_hashes.h"
#include "data/dedup/shard_subset.h"
#include "dist/communicator.h"

namespace vlm {

struct DedupJobOptions {
  std::vector<std::string> shards;  // expanded shard list (expand_shard_spec)
  std::string out_dir;
  DedupCriteria criteria;
  int num_perm = 128;       // MinHash slots when criteria.uses_caption()
  int threads = 0;          // hashing / rewrite workers besides the caller, per rank
  bool rewrite = false;     // write <out>/shards/ without the duplicates
  size_t max_examples = 10; // clusters and bad images listed in the report
  ScanProgressFn progress;  // this rank's hashing progress
};

struct DedupJobSummary {
  int rank = 0, world_size = 1;
  ShardScanStats scan;      // all ranks (rank 0), else this rank's
  DedupResult result;       // rank 0 only
  SubsetRewriteStats rewrite;  // this rank's shards
  double hash_seconds = 0, cluster_seconds = 0, rewrite_seconds = 0;
  std::string report_text;  // rank 0 only
  std::vector<std::string> files;  // written on this rank
};

// Every rank of `comm` calls it with the same options (a world of one: make_local_communicator()).
Expected<DedupJobSummary> run_dedup_job(const DedupJobOptions& options, dist::Communicator& comm);

// Writers used by the job (exposed for tests).
// Writes `path` through `path.tmp` + rename, so a reader never sees half a file.
Status write_text_file_atomic(const std::string& path, const std::string& text);
Status write_keep_list(const std::string& path, const std::vector<std::string>& shards,
                       const std::vector<SampleHashes>& records, const DedupResult& result);
Status write_removed_list(const std::string& path, const std::vector<std::string>& shards,
                          const std::vector<SampleHashes>& records, const DedupResult& result);
// report.json's text and report.txt's text.
std::string dedup_report_json(const DedupJobOptions& options, const DedupJobSummary& summary,
                              const std::vector<SampleHashes>& records);
std::string dedup_report_text(const DedupJobOptions& options, const DedupJobSummary& summary,
                              const std::vector<SampleHashes>& records);

}  // namespace vlm
