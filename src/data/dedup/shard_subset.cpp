// Rewriting shards with a subset of their samples (see shard_subset.h).
#include "data/dedup/shard_subset.h"

#include <filesystem>
#include <memory>
#include <mutex>
#include <set>

#include "core/logging.h"
#include "data/io/tar.h"

namespace vlm {
namespace fs = std::filesystem;
namespace {

constexpr size_t kMaxReportedErrors = 20;

std::string file_name_of(const std::string& shard) {
  // URLs and pipe: specs have no usable file name beyond the last '/' (query strings are cut).
  std::string name = shard;
  if (const auto q = name.find_first_of("?#"); q != std::string::npos && name.find("://") != std::string::npos)
    name.resize(q);
  if (const auto slash = name.find_last_of('/'); slash != std::string::npos) name = name.substr(slash + 1);
  return name;
}

std::string normal_path(const std::string& p) {
  std::error_code ec;
  fs::path abs = fs::weakly_canonical(fs::path(p), ec);
  if (ec) abs = fs::absolute(fs::path(p), ec).lexically_normal();
  return abs.string();
}

struct ShardOutcome {
  uint64_t kept = 0, dropped = 0, skipped = 0, bytes = 0, unsafe = 0;
  bool written = false, empty = false, failed = false;
  std::vector<std::string> errors;
};

ShardOutcome rewrite_one(const std::string& input, uint32_t shard_index, const std::string& output,
                         const KeepSampleFn& keep) {
  ShardOutcome o;
  auto reader = WebDatasetReader::open(input);
  if (!reader.ok()) {
    o.failed = true;
    o.errors.push_back(str(input, ": ", reader.status().message()));
    return o;
  }
  std::unique_ptr<TarWriter> writer;
  auto write_sample = [&](const WebDatasetSample& s) -> Status {
    if (!writer) {
      auto w = TarWriter::create(output);
      if (!w.ok()) return w.status();
      writer = std::move(*w);
    }
    for (const auto& [field, bytes] : s.fields) VLM_RETURN_IF_ERROR(writer->add(s.key + "." + field, bytes));
    return Status();
  };
  while (true) {
    WebDatasetSample sample;
    auto more = (*reader)->next(sample);
    if (!more.ok()) {
      if ((*reader)->failed()) {
        o.failed = true;
        o.errors.push_back(str(input, ": ", more.status().message()));
        break;
      }
      ++o.skipped;
      o.errors.push_back(more.status().message());
      continue;
    }
    if (!*more) break;
    if (!keep(shard_index, sample)) {
      ++o.dropped;
      continue;
    }
    if (Status s = write_sample(sample); !s.ok()) {
      o.failed = true;
      o.errors.push_back(str(output, ": ", s.message()));
      writer.reset();  // removes the temp file: no partial output
      o.unsafe = (*reader)->tar().unsafe_names_skipped();
      return o;
    }
    ++o.kept;
  }
  o.unsafe = (*reader)->tar().unsafe_names_skipped();
  if (!writer) {
    o.empty = true;
    return o;
  }
  if (Status s = writer->close(); !s.ok()) {
    o.failed = true;
    o.errors.push_back(str(output, ": ", s.message()));
    return o;
  }
  o.bytes = writer->bytes_written();
  o.written = true;
  return o;
}

}  // namespace

Expected<std::vector<std::string>> subset_output_paths(const std::vector<std::string>& shards,
                                                       const std::vector<uint32_t>& which, const std::string& out_dir) {
  if (out_dir.empty()) return invalid_argument("rewrite: empty output directory");
  std::set<std::string> inputs;
  for (const auto& s : shards) inputs.insert(normal_path(s));
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (uint32_t i : which) {
    if (i >= shards.size()) return invalid_argument(str("rewrite: shard index ", i, " of ", shards.size()));
    const std::string name = file_name_of(shards[i]);
    if (name.empty() || name == "." || name == "..")
      return invalid_argument(str("rewrite: shard '", shards[i], "' has no file name to write under"));
    const std::string path = (fs::path(out_dir) / name).string();
    const std::string key = normal_path(path);
    if (inputs.count(key)) return invalid_argument(str("rewrite: output ", path, " would overwrite input shard ", shards[i]));
    if (!seen.insert(key).second)
      return invalid_argument(str("rewrite: two input shards share the file name '", name, "' (", path, ")"));
    out.push_back(path);
  }
  return out;
}

Expected<SubsetRewriteStats> rewrite_shard_subset(const std::vector<std::string>& shards,
                                                  const std::vector<uint32_t>& which, const std::string& out_dir,
                                                  const KeepSampleFn& keep, ThreadPool& pool) {
  VLM_ASSIGN_OR_RETURN(std::vector<std::string> outputs, subset_output_paths(shards, which, out_dir));
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return io_error(str("rewrite: cannot create ", out_dir, ": ", ec.message()));
  std::vector<ShardOutcome> outcomes(which.size());
  pool.parallel_for(which.size(), [&](size_t i) { outcomes[i] = rewrite_one(shards[which[i]], which[i], outputs[i], keep); });
  SubsetRewriteStats stats;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const ShardOutcome& o = outcomes[i];
    stats.samples_kept += o.kept;
    stats.samples_dropped += o.dropped;
    stats.samples_skipped += o.skipped;
    stats.unsafe_members += o.unsafe;
    stats.bytes_written += o.bytes;
    stats.shards_written += o.written;
    stats.shards_empty += o.empty;
    stats.shards_failed += o.failed;
    if (o.written) stats.written.push_back(outputs[i]);
    for (const auto& e : o.errors) {
      VLM_WARN("rewrite: ", e);
      if (stats.errors.size() < kMaxReportedErrors) stats.errors.push_back(e);
    }
  }
  return stats;
}

}  // namespace vlm
