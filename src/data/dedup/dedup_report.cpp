// keep.jsonl, removed.jsonl, report.json and report.txt of a dedup job (see dedup_job.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "data/dedup/dedup_job.h"
#include "data/dedup/phash.h"

namespace vlm {
namespace {

using nlohmann::json;

// JSON text that never throws on invalid UTF-8 in keys or messages (bytes are replaced).
std::string dump(const json& j, int indent = -1) { return j.dump(indent, ' ', false, json::error_handler_t::replace); }

}  // namespace

Status write_text_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return io_error(str(tmp, ": cannot open for writing"));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    return io_error(str(tmp, ": write failed"));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return io_error(str(path, ": rename failed: ", ec.message()));
  return Status();
}

namespace {

std::string with_commas(uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string s;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s.push_back(',');
    s.push_back(digits[i]);
  }
  return s;
}

json index_stats_json(const IndexStats& s) {
  return {{"distinct_values", s.distinct_values},   {"identical_matches", s.identical_matches},
          {"candidates_checked", s.candidates_checked}, {"pairs_matched", s.pairs_matched},
          {"capped_buckets", s.capped_buckets},     {"skipped_insertions", s.skipped_insertions},
          {"blocks", s.blocks}, {"radius", s.radius}, {"bands", s.bands}, {"rows", s.rows}};
}

// Clusters of size >= 2 as member lists (record indices, ascending), largest first, ties by first member.
std::vector<std::vector<uint32_t>> largest_clusters(const DedupResult& r, size_t max_clusters) {
  std::map<uint32_t, std::vector<uint32_t>> by_root;
  for (uint32_t i = 0; i < r.cluster.size(); ++i)
    if (r.cluster[i] != i) by_root[r.cluster[i]].push_back(i);
  std::vector<std::vector<uint32_t>> clusters;
  for (auto& [root, members] : by_root) {
    members.insert(members.begin(), root);
    clusters.push_back(std::move(members));
  }
  std::stable_sort(clusters.begin(), clusters.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  if (clusters.size() > max_clusters) clusters.resize(max_clusters);
  return clusters;
}

}  // namespace

Status write_keep_list(const std::string& path, const std::vector<std::string>& shards,
                       const std::vector<SampleHashes>& records, const DedupResult& result) {
  std::string text;
  for (size_t i = 0; i < records.size(); ++i)
    if (result.keep[i]) text += dump(json{{"shard", shards[records[i].shard]}, {"key", records[i].key}}) + "\n";
  return write_text_file_atomic(path, text);
}

Status write_removed_list(const std::string& path, const std::vector<std::string>& shards,
                          const std::vector<SampleHashes>& records, const DedupResult& result) {
  std::string text;
  for (size_t i = 0; i < records.size(); ++i) {
    if (result.keep[i]) continue;
    const SampleHashes& kept = records[result.cluster[i]];
    const SampleHashes& other = records[result.matched[i]];
    json j{{"shard", shards[records[i].shard]}, {"key", records[i].key}, {"kind", dup_kind_name(result.kind[i])}};
    if (result.kind[i] == DupKind::bad_image) {
      j["error"] = records[i].image_error;
    } else {
      j["duplicate_of_shard"] = shards[kept.shard];  // the cluster's kept sample
      j["duplicate_of"] = kept.key;
      j["matched_shard"] = shards[other.shard];      // the other end of this sample's strongest pair
      j["matched"] = other.key;
      if (result.kind[i] == DupKind::image) j["phash_distance"] = hamming_distance(records[i].phash, other.phash);
      if (result.kind[i] == DupKind::caption)
        j["caption_jaccard"] = minhash_jaccard(records[i].minhash.data(), other.minhash.data(),
                                               static_cast<int>(other.minhash.size()));
    }
    text += dump(j) + "\n";
  }
  return write_text_file_atomic(path, text);
}

std::string dedup_report_json(const DedupJobOptions& options, const DedupJobSummary& summary,
                              const std::vector<SampleHashes>& records) {
  const DedupResult& r = summary.result;
  const ShardScanStats& scan = summary.scan;
  json j;
  j["criteria"] = {{"exact", options.criteria.exact},
                   {"phash_distance", options.criteria.phash_distance},
                   {"caption_jaccard", options.criteria.caption_jaccard},
                   {"drop_bad_images", options.criteria.drop_bad_images},
                   {"clustering", dedup_clustering_name(options.criteria.clustering)}};
  j["shards"] = {{"total", options.shards.size()}, {"read", scan.shards_read}, {"failed", scan.shards_failed},
                 {"errors", scan.errors}};
  j["ranks"] = summary.world_size;
  j["samples"] = r.samples;
  j["samples_skipped"] = scan.samples_skipped;
  j["kept"] = r.kept;
  j["dropped"] = {{"exact", r.dropped_exact}, {"image", r.dropped_image}, {"caption", r.dropped_caption},
                  {"bad_image", r.dropped_bad_image}, {"total", r.samples - r.kept}};
  j["pairs"] = {{"exact", r.pairs_exact}, {"image", r.pairs_image}, {"caption", r.pairs_caption}};
  j["bad_images"] = r.bad_images;
  j["no_image"] = r.no_image;
  j["no_caption"] = r.no_caption;
  j["clusters"] = r.clusters;
  json hist = json::object();
  for (size_t s = 2; s < r.cluster_size_histogram.size(); ++s)
    if (r.cluster_size_histogram[s]) hist[std::to_string(s)] = r.cluster_size_histogram[s];
  j["cluster_sizes"] = hist;
  json examples = json::array();
  for (const auto& members : largest_clusters(r, options.max_examples)) {
    json m = json::array();
    for (size_t k = 0; k < members.size() && k < 8; ++k) {
      const SampleHashes& h = records[members[k]];
      m.push_back({{"shard", options.shards[h.shard]}, {"key", h.key}, {"kind", dup_kind_name(r.kind[members[k]])}});
    }
    examples.push_back({{"size", members.size()}, {"members", m}});
  }
  j["largest_clusters"] = examples;
  json bad = json::array();
  for (const SampleHashes& h : records) {
    if (h.image != SampleImageState::bad_image) continue;
    if (bad.size() >= options.max_examples) break;
    bad.push_back({{"shard", options.shards[h.shard]}, {"key", h.key}, {"error", h.image_error}});
  }
  j["bad_image_examples"] = bad;
  if (options.criteria.uses_phash()) j["phash_index"] = index_stats_json(r.phash_index);
  if (options.criteria.uses_caption()) j["caption_index"] = index_stats_json(r.caption_index);
  j["seconds"] = {{"hash", summary.hash_seconds}, {"cluster", summary.cluster_seconds},
                  {"rewrite", summary.rewrite_seconds}};
  if (options.rewrite)
    j["rewrite"] = {{"shards_written", summary.rewrite.shards_written}, {"shards_empty", summary.rewrite.shards_empty},
                    {"shards_failed", summary.rewrite.shards_failed}, {"samples_kept", summary.rewrite.samples_kept},
                    {"samples_dropped", summary.rewrite.samples_dropped}, {"bytes", summary.rewrite.bytes_written}};
  return dump(j, 2) + "\n";
}

std::string dedup_report_text(const DedupJobOptions& options, const DedupJobSummary& summary,
                              const std::vector<SampleHashes>& records) {
  const DedupResult& r = summary.result;
  const ShardScanStats& scan = summary.scan;
  std::string t;
  auto line = [&](const std::string& s) { t += s + "\n"; };
  const double pct = r.samples ? 100.0 * static_cast<double>(r.kept) / static_cast<double>(r.samples) : 100.0;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f%%", pct);
  line(str("dedup: ", with_commas(r.samples), " samples in ", options.shards.size(), " shards (", scan.shards_failed,
           " failed, ", scan.samples_skipped, " malformed samples skipped), ", summary.world_size, " rank(s)"));
  line(str("  kept       ", with_commas(r.kept), " (", buf, ")"));
  line(str("  dropped    ", with_commas(r.samples - r.kept), ": exact ", with_commas(r.dropped_exact), ", image ",
           with_commas(r.dropped_image), ", caption ", with_commas(r.dropped_caption), ", bad image ",
           with_commas(r.dropped_bad_image)));
  std::string sizes;
  uint64_t largest = 0;
  for (size_t s = 2; s < r.cluster_size_histogram.size(); ++s) {
    if (!r.cluster_size_histogram[s]) continue;
    largest = s;
    if (s <= 5) sizes += str(sizes.empty() ? "" : ", ", "size ", s, ": ", with_commas(r.cluster_size_histogram[s]));
  }
  uint64_t bigger = 0;
  for (size_t s = 6; s < r.cluster_size_histogram.size(); ++s) bigger += r.cluster_size_histogram[s];
  if (bigger) sizes += str(", size 6+: ", with_commas(bigger));
  line(str("  clusters   ", with_commas(r.clusters), " ", dedup_clustering_name(options.criteria.clustering),
           sizes.empty() ? "" : " (" + sizes + ")", largest ? str(", largest ", largest) : ""));
  line(str("  problems   bad images ", r.bad_images, ", no image ", r.no_image,
           options.criteria.uses_caption() ? str(", no caption ", r.no_caption) : ""));
  if (options.criteria.uses_phash())
    line(str("  pHash index: distance <= ", options.criteria.phash_distance, ", ", r.phash_index.blocks,
             " blocks radius ", r.phash_index.radius, ", ", with_commas(r.phash_index.candidates_checked),
             " candidates checked, ", r.phash_index.capped_buckets, " capped buckets"));
  if (options.criteria.uses_caption())
    line(str("  caption LSH: Jaccard >= ", options.criteria.caption_jaccard, ", ", r.caption_index.bands, " bands x ",
             r.caption_index.rows, " rows, ", with_commas(r.caption_index.candidates_checked), " candidates checked"));
  const auto clusters = largest_clusters(r, std::min<size_t>(options.max_examples, 5));
  if (!clusters.empty()) line("  largest clusters (first member is kept):");
  for (const auto& members : clusters) {
    std::string m;
    for (size_t k = 0; k < members.size() && k < 4; ++k) {
      m += k ? ", " : "";
      m += records[members[k]].key;
      if (k) m += str(" (", dup_kind_name(r.kind[members[k]]), ")");
    }
    if (members.size() > 4) m += str(", ... ", members.size() - 4, " more");
    line(str("    [", members.size(), "] ", m));
  }
  size_t shown = 0;
  for (const SampleHashes& h : records) {
    if (h.image != SampleImageState::bad_image || shown >= 3) continue;
    if (shown++ == 0) line("  bad images:");
    line(str("    ", options.shards[h.shard], " ", h.key, ": ", h.image_error));
  }
  line(str("  time: hash ", summary.hash_seconds, " s, cluster ", summary.cluster_seconds, " s",
           options.rewrite ? str(", rewrite ", summary.rewrite_seconds, " s") : ""));
  return t;
}

}  // namespace vlm
