// `vlm data dedup` as a library call: hash (spread over ranks) -> gather -> cluster -> lists, report, rewrite
// (see dedup_job.h).
#include "data/dedup/dedup_job.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <unordered_set>

namespace vlm {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

uint64_t sample_id(uint32_t shard, uint64_t index_in_shard) {
  return (static_cast<uint64_t>(shard) << 40) ^ index_in_shard;  // shards < 2^24, samples per shard < 2^40
}

Status validate(const DedupJobOptions& o) {
  if (o.shards.empty()) return invalid_argument("dedup: no shards");
  if (o.shards.size() >= (size_t{1} << 24)) return invalid_argument(str("dedup: ", o.shards.size(), " shards (max 2^24)"));
  if (o.out_dir.empty()) return invalid_argument("dedup: no output directory (--out)");
  if (o.num_perm < 1 || o.num_perm > 4096) return invalid_argument(str("dedup: num_perm ", o.num_perm, " not in [1, 4096]"));
  if (o.threads < 0) return invalid_argument(str("dedup: threads ", o.threads, " < 0"));
  return o.criteria.validate();
}

// Rewrite counters travel to rank 0 as 7 little-endian u64.
std::string pack_rewrite(const SubsetRewriteStats& s) {
  std::string out;
  for (uint64_t v : {s.shards_written, s.shards_empty, s.shards_failed, s.samples_kept, s.samples_dropped,
                     s.samples_skipped, s.bytes_written})
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  return out;
}

Status add_packed_rewrite(const std::string& bytes, SubsetRewriteStats& total) {
  if (bytes.size() != 56) return parse_error(str("dedup: rewrite counters of ", bytes.size(), " bytes (expected 56)"));
  uint64_t v[7];
  for (int k = 0; k < 7; ++k) {
    v[k] = 0;
    for (int i = 0; i < 8; ++i)
      v[k] |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[static_cast<size_t>(k * 8 + i)])) << (8 * i);
  }
  total.shards_written += v[0], total.shards_empty += v[1], total.shards_failed += v[2];
  total.samples_kept += v[3], total.samples_dropped += v[4], total.samples_skipped += v[5], total.bytes_written += v[6];
  return Status();
}

// Rank 0's status on every rank, so all ranks stop together when rank 0 fails (one rank: the status itself).
Status share_root_status(dist::Communicator& comm, const Status& status) {
  if (comm.size() == 1) return status;
  std::string bytes(1, static_cast<char>(status.code()));
  if (!status.ok()) bytes += status.message();
  VLM_RETURN_IF_ERROR(dist::broadcast_string(comm, bytes, 0));
  if (bytes.empty() || static_cast<StatusCode>(bytes[0]) == StatusCode::ok) return Status();
  return Status(static_cast<StatusCode>(bytes[0]), str("rank 0: ", bytes.substr(1)));
}

}  // namespace

Expected<DedupJobSummary> run_dedup_job(const DedupJobOptions& options, dist::Communicator& comm) {
  VLM_RETURN_IF_ERROR(validate(options));
  namespace fs = std::filesystem;
  DedupJobSummary summary;
  summary.rank = comm.rank();
  summary.world_size = comm.size();
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) return io_error(str("dedup: cannot create ", options.out_dir, ": ", ec.message()));

  std::vector<uint32_t> mine;
  for (size_t i = static_cast<size_t>(comm.rank()); i < options.shards.size(); i += static_cast<size_t>(comm.size()))
    mine.push_back(static_cast<uint32_t>(i));
  const std::string rewrite_dir = (fs::path(options.out_dir) / "shards").string();
  if (options.rewrite) VLM_RETURN_IF_ERROR(subset_output_paths(options.shards, mine, rewrite_dir).status());

  // 1. Hash this rank's shards.
  HashOptions hash_options;
  hash_options.phash = options.criteria.uses_phash();
  hash_options.minhash = options.criteria.uses_caption();
  hash_options.num_perm = options.num_perm;
  ThreadPool pool(options.threads);
  std::vector<SampleHashes> records;
  auto t0 = std::chrono::steady_clock::now();
  summary.scan = scan_shards(options.shards, mine, hash_options, pool, records, options.progress);

  // 2. Gather to rank 0, back in shard list order.
  if (comm.size() > 1) {
    const std::vector<uint8_t> packed = pack_sample_hashes(records, summary.scan);
    VLM_ASSIGN_OR_RETURN(auto blobs, dist::gather_strings(comm, std::string(packed.begin(), packed.end()), 0));
    if (comm.rank() == 0) {
      records.clear();
      summary.scan = ShardScanStats();
      for (size_t r = 0; r < blobs.size(); ++r) {
        std::vector<SampleHashes> part;
        ShardScanStats stats;
        const auto* bytes = reinterpret_cast<const uint8_t*>(blobs[r].data());
        if (Status s = unpack_sample_hashes(bytes, blobs[r].size(), part, stats); !s.ok())
          return s.with_context(str("hashes from rank ", r));
        summary.scan += stats;
        std::move(part.begin(), part.end(), std::back_inserter(records));
      }
      std::stable_sort(records.begin(), records.end(), [](const SampleHashes& a, const SampleHashes& b) {
        return a.shard != b.shard ? a.shard < b.shard : a.index_in_shard < b.index_in_shard;
      });
    }
  }
  summary.hash_seconds = seconds_since(t0);

  // 3. Cluster and write the lists on rank 0.
  Status root_status;
  std::string removed_ids;  // 8 little-endian bytes per dropped sample's id
  if (comm.rank() == 0) {
    t0 = std::chrono::steady_clock::now();
    summary.result = cluster_duplicates(records, options.criteria);
    summary.cluster_seconds = seconds_since(t0);
    const std::string keep_path = (fs::path(options.out_dir) / "keep.jsonl").string();
    const std::string removed_path = (fs::path(options.out_dir) / "removed.jsonl").string();
    root_status = write_keep_list(keep_path, options.shards, records, summary.result);
    if (root_status.ok()) root_status = write_removed_list(removed_path, options.shards, records, summary.result);
    if (root_status.ok()) summary.files.insert(summary.files.end(), {keep_path, removed_path});
    for (size_t i = 0; i < records.size(); ++i) {
      if (summary.result.keep[i]) continue;
      const uint64_t id = sample_id(records[i].shard, records[i].index_in_shard);
      for (int b = 0; b < 8; ++b) removed_ids.push_back(static_cast<char>(id >> (8 * b)));
    }
  }
  VLM_RETURN_IF_ERROR(share_root_status(comm, root_status));

  // 4. Rewrite: every rank rewrites the shards it hashed.
  if (options.rewrite) {
    t0 = std::chrono::steady_clock::now();
    if (comm.size() > 1) VLM_RETURN_IF_ERROR(dist::broadcast_string(comm, removed_ids, 0));
    std::unordered_set<uint64_t> removed;
    removed.reserve(removed_ids.size() / 8);
    for (size_t p = 0; p + 8 <= removed_ids.size(); p += 8) {
      uint64_t id = 0;
      for (int b = 0; b < 8; ++b)
        id |= static_cast<uint64_t>(static_cast<uint8_t>(removed_ids[p + static_cast<size_t>(b)])) << (8 * b);
      removed.insert(id);
    }
    auto keep = [&](uint32_t shard, const WebDatasetSample& s) {
      return removed.count(sample_id(shard, s.index_in_shard)) == 0;
    };
    VLM_ASSIGN_OR_RETURN(summary.rewrite, rewrite_shard_subset(options.shards, mine, rewrite_dir, keep, pool));
    summary.files.insert(summary.files.end(), summary.rewrite.written.begin(), summary.rewrite.written.end());
    if (comm.size() > 1) {
      VLM_ASSIGN_OR_RETURN(auto blobs, dist::gather_strings(comm, pack_rewrite(summary.rewrite), 0));
      if (comm.rank() == 0) {
        SubsetRewriteStats total;
        for (const auto& b : blobs) VLM_RETURN_IF_ERROR(add_packed_rewrite(b, total));
        total.errors = summary.rewrite.errors;
        total.written = summary.rewrite.written;
        summary.rewrite = std::move(total);
      }
    }
    summary.rewrite_seconds = seconds_since(t0);
  }

  // 5. Reports.
  if (comm.rank() == 0) {
    const std::string json_path = (fs::path(options.out_dir) / "report.json").string();
    const std::string text_path = (fs::path(options.out_dir) / "report.txt").string();
    summary.report_text = dedup_report_text(options, summary, records);
    root_status = write_text_file_atomic(json_path, dedup_report_json(options, summary, records));
    if (root_status.ok()) root_status = write_text_file_atomic(text_path, summary.report_text);
    if (root_status.ok()) summary.files.insert(summary.files.end(), {json_path, text_path});
  }
  VLM_RETURN_IF_ERROR(share_root_status(comm, root_status));
  return summary;
}

}  // namespace vlm
