// The dedup job end to end on planted duplicates, with measured precision and recall per kind:
//   exact copies, JPEG re-encodes (q92 -> q60) and 70% resizes: recall >= 0.95 (exact must be 1.0);
//   2% crops and +20 brightness: recall >= 0.85 (pHash distance <= 10: measured ~96% of 2% crops are within 10);
//   caption near-duplicates (two words swapped, punctuation and case changed): recall >= 0.95 at Jaccard >= 0.5;
//   precision over all drops >= 0.95; corrupt images counted and reported, never a crash.
// Then the keep-list, the removed list, the report and the rewritten shards are checked against each other, and the
// edge cases run: no samples, one sample, all identical, a missing shard.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "data/dedup/dedup_job.h"
#include "data/loader/sample_stream.h"
#include "dedup_test_util.h"

namespace vlm {
namespace {

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

std::vector<std::string> keys_in_shards(const std::vector<std::string>& shards) {
  std::vector<std::string> keys;
  for (const auto& s : shards) {
    auto reader = WebDatasetReader::open(s);
    EXPECT_TRUE(reader.ok()) << s;
    if (!reader.ok()) continue;
    WebDatasetSample sample;
    while (true) {
      auto more = (*reader)->next(sample);
      EXPECT_TRUE(more.ok()) << more.status().to_string();
      if (!more.ok() || !*more) break;
      EXPECT_TRUE(sample.has("jpg") && sample.has("txt")) << sample.key;
      keys.push_back(sample.key);
    }
  }
  return keys;
}

DedupJobSummary run_job(const DedupJobOptions& o) {
  auto world = dist::make_local_communicator();
  auto summary = run_dedup_job(o, *world);
  EXPECT_TRUE(summary.ok()) << summary.status().to_string();
  return summary.ok() ? std::move(*summary) : DedupJobSummary{};
}

void planted_duplicates_precision_recall_and_outputs(DedupClustering clustering) {
  const std::string dir = testing::fresh_temp_dir(str("planted_", dedup_clustering_name(clustering)));
  const auto data = testing::write_planted_dataset(dir, 4, 240, 25, 3, 17);
  DedupJobOptions o;
  o.shards = data.shards;
  o.out_dir = dir + "/out";
  o.criteria.phash_distance = 10;
  o.criteria.caption_jaccard = 0.5;
  o.criteria.clustering = clustering;
  o.threads = 2;
  o.rewrite = true;
  const DedupJobSummary s = run_job(o);
  const DedupResult& r = s.result;
  ASSERT_EQ(r.samples, data.keys.size());

  // Per kind: planted / found, and drops that hit an unplanted sample.
  std::map<std::string, std::pair<int, int>> per_kind;
  int dropped = 0, true_drops = 0;
  for (size_t i = 0; i < data.keys.size(); ++i) {
    const std::string& kind = data.truth[i];
    const bool planted_dup = !kind.empty() && kind != "corrupt";
    if (planted_dup) ++per_kind[kind].first, per_kind[kind].second += !r.keep[i];
    if (!r.keep[i]) ++dropped, true_drops += planted_dup;
    if (kind == "exact") {
      EXPECT_EQ(r.kind[i], DupKind::exact) << data.keys[i];
    }
  }
  const double precision = dropped ? static_cast<double>(true_drops) / dropped : 0;
  auto recall = [&](std::initializer_list<const char*> kinds) {
    int planted = 0, found = 0;
    for (const char* k : kinds) planted += per_kind[k].first, found += per_kind[k].second;
    return static_cast<double>(found) / planted;
  };
  std::printf("%s: precision %.3f; recall exact %.3f reencoded %.3f resized %.3f cropped %.3f brighter %.3f "
              "caption %.3f\n",
              dedup_clustering_name(clustering), precision, recall({"exact"}), recall({"reencoded"}),
              recall({"resized"}), recall({"cropped"}), recall({"brighter"}), recall({"caption"}));
  EXPECT_GE(precision, 0.95);
  EXPECT_EQ(recall({"exact"}), 1.0);
  EXPECT_GE(recall({"exact", "reencoded", "resized"}), 0.95);
  EXPECT_GE(recall({"cropped", "brighter"}), 0.85);
  EXPECT_GE(recall({"caption"}), 0.95);
  EXPECT_EQ(r.bad_images, 3u);
  EXPECT_EQ(r.kept + r.dropped_exact + r.dropped_image + r.dropped_caption, r.samples);

  // keep.jsonl lists exactly the kept samples in order; the rewritten shards hold exactly them.
  const auto keep = read_jsonl(o.out_dir + "/keep.jsonl");
  ASSERT_EQ(keep.size(), r.kept);
  std::vector<std::string> kept_keys;
  for (size_t i = 0; i < data.keys.size(); ++i)
    if (r.keep[i]) kept_keys.push_back(data.keys[i]);
  for (size_t i = 0; i < keep.size(); ++i) EXPECT_EQ(keep[i]["key"], kept_keys[i]);
  EXPECT_EQ(keys_in_shards(s.rewrite.written), kept_keys);
  EXPECT_EQ(s.rewrite.samples_kept, r.kept);
  EXPECT_EQ(s.rewrite.samples_dropped, r.samples - r.kept);
  // removed.jsonl: every dropped sample with what it duplicates (an earlier sample).
  const auto removed = read_jsonl(o.out_dir + "/removed.jsonl");
  ASSERT_EQ(removed.size(), r.samples - r.kept);
  for (const auto& row : removed) {
    EXPECT_LT(row["duplicate_of"].get<std::string>(), row["key"].get<std::string>()) << row.dump();
    EXPECT_NE(row["matched"].get<std::string>(), row["key"].get<std::string>()) << row.dump();
  }
  // report.json agrees; report.txt names the counts and a bad image.
  std::ifstream report_in(o.out_dir + "/report.json");
  const auto report = nlohmann::json::parse(report_in);
  EXPECT_EQ(report["kept"], r.kept);
  EXPECT_EQ(report["dropped"]["exact"], r.dropped_exact);
  EXPECT_EQ(report["bad_images"], 3);
  EXPECT_EQ(report["bad_image_examples"].size(), 3u);
  EXPECT_FALSE(report["largest_clusters"].empty());
  EXPECT_NE(s.report_text.find("bad images"), std::string::npos) << s.report_text;
  EXPECT_EQ(report["criteria"]["clustering"], dedup_clustering_name(clustering));
  std::printf("%s", s.report_text.c_str());
}

TEST(DedupJob, PlantedDuplicatesPrecisionRecallAndOutputs) {
  planted_duplicates_precision_recall_and_outputs(DedupClustering::transitive);
}

// Star clustering finds the same planted duplicates: each is near its original, which is kept.
TEST(DedupJob, PlantedDuplicatesPrecisionRecallAndOutputsStar) {
  planted_duplicates_precision_recall_and_outputs(DedupClustering::star);
}

TEST(DedupJob, DropBadImagesAndExactOnly) {
  const std::string dir = testing::fresh_temp_dir("exact_only");
  const auto data = testing::write_planted_dataset(dir, 2, 40, 5, 2, 3);
  DedupJobOptions o;
  o.shards = data.shards;
  o.out_dir = dir + "/out";
  o.criteria.drop_bad_images = true;
  const DedupJobSummary s = run_job(o);
  for (size_t i = 0; i < data.keys.size(); ++i) {
    if (data.truth[i] == "exact") {
      EXPECT_FALSE(s.result.keep[i]);
    }
    // Exact mode never decodes: a corrupt image is not noticed; only byte-identical samples are dropped (two
    // re-encodes of one base at the same quality are byte-identical too).
    if (data.truth[i] == "corrupt") {
      EXPECT_TRUE(s.result.keep[i]) << data.keys[i];
    }
    if (!s.result.keep[i]) {
      EXPECT_EQ(s.result.kind[i], DupKind::exact) << data.keys[i];
    }
  }
  o.criteria.phash_distance = 4;
  const DedupJobSummary with_phash = run_job(o);
  EXPECT_EQ(with_phash.result.dropped_bad_image, 2u);
}

TEST(DedupJob, EdgeCases) {
  const std::string dir = testing::fresh_temp_dir("edges");
  DedupJobOptions o;
  o.criteria.phash_distance = 8;
  o.criteria.caption_jaccard = 0.7;
  // A shard with no samples.
  testing::write_plain_shard(dir + "/empty.tar", {}, 0, 0);
  o.shards = {dir + "/empty.tar"};
  o.out_dir = dir + "/out_empty";
  DedupJobSummary s = run_job(o);
  EXPECT_EQ(s.result.samples, 0u);
  EXPECT_TRUE(read_jsonl(o.out_dir + "/keep.jsonl").empty());
  // One sample.
  const auto jpg = testing::jpeg_bytes(testing::photo_like_image(1), 90);
  std::vector<testing::PlainSample> one = {{"only", jpg, "a caption", ""}};
  testing::write_plain_shard(dir + "/one.tar", one, 0, 1);
  o.shards = {dir + "/one.tar"};
  o.out_dir = dir + "/out_one";
  s = run_job(o);
  EXPECT_EQ(s.result.kept, 1u);
  // All identical: one kept, the rest exact duplicates in one cluster.
  std::vector<testing::PlainSample> same;
  for (int i = 0; i < 50; ++i) {
    testing::PlainSample sample{std::to_string(100 + i), jpg, "the same caption", ""};
    same.push_back(std::move(sample));
  }
  testing::write_plain_shard(dir + "/same.tar", same, 0, same.size());
  o.shards = {dir + "/same.tar", dir + "/missing.tar"};
  o.out_dir = dir + "/out_same";
  s = run_job(o);
  EXPECT_EQ(s.result.kept, 1u);
  EXPECT_EQ(s.result.dropped_exact, 49u);
  EXPECT_EQ(s.result.clusters, 1u);
  ASSERT_GE(s.result.cluster_size_histogram.size(), 51u);
  EXPECT_EQ(s.result.cluster_size_histogram[50], 1u);
  EXPECT_EQ(s.scan.shards_failed, 1u);  // the missing shard is reported, not fatal
  // Bad options are errors naming the field.
  auto world = dist::make_local_communicator();
  o.criteria.phash_distance = 40;
  auto bad = run_dedup_job(o, *world);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("phash_distance"), std::string::npos);
  o.criteria = DedupCriteria{};
  o.shards.clear();
  EXPECT_FALSE(run_dedup_job(o, *world).ok());
}

TEST(DedupJob, RewriteRefusesToOverwriteInputsOrCollide) {
  const std::vector<std::string> shards = {"/data/a/x.tar", "/data/b/x.tar"};
  EXPECT_FALSE(subset_output_paths(shards, {0, 1}, "/out").ok());  // same file name twice
  EXPECT_FALSE(subset_output_paths(shards, {0}, "/data/a").ok());  // would overwrite the input
  auto ok = subset_output_paths(shards, {1}, "/out");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)[0], "/out/x.tar");
}

}  // namespace
}  // namespace vlm
