// `vlm data filter` as a library call: every sample fails exactly one planted check (or passes), the counters per
// reason and the rewritten shards must say so; --where text maps onto the metadata thresholds.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/dedup/filter_job.h"
#include "data/io/webdataset.h"
#include "dedup_test_util.h"

namespace vlm {
namespace {

std::vector<std::string> shard_keys(const std::string& path) {
  std::vector<std::string> keys;
  auto reader = WebDatasetReader::open(path);
  if (!reader.ok()) return keys;
  WebDatasetSample s;
  while (true) {
    auto more = (*reader)->next(s);
    if (!more.ok() || !*more) break;
    keys.push_back(s.key);
  }
  return keys;
}

TEST(FilterJob, CountsEachReasonAndKeepsPassingSamples) {
  const std::string dir = testing::fresh_temp_dir("filter");
  auto jpg = [](int w, int h) { return testing::jpeg_bytes(testing::photo_like_image(w * 1000 + h, w, h), 85); };
  const std::string good_json = R"({"similarity": 0.35})";
  std::vector<testing::PlainSample> samples = {
      {"a_good", jpg(64, 64), "a fine long caption", good_json},
      {"b_small", jpg(16, 16), "a fine long caption", good_json},
      {"c_wide", jpg(200, 40), "a fine long caption", good_json},
      {"d_short", jpg(64, 64), "hi", good_json},
      {"e_lowsim", jpg(64, 64), "a fine long caption", R"({"similarity": 0.1})"},
      {"f_nosim", jpg(64, 64), "a fine long caption", R"({"other": 1})"},
      {"g_corrupt", {'j', 'u', 'n', 'k'}, "a fine long caption", good_json},
      {"h_good", jpg(80, 60), "another fine caption", good_json},
      {"i_badjson", jpg(64, 64), "a fine long caption", "{not json"},
  };
  testing::write_plain_shard(dir + "/part-0.tar", samples, 0, 5);
  testing::write_plain_shard(dir + "/part-1.tar", samples, 5, samples.size());
  testing::write_plain_shard(dir + "/part-2.tar", samples, 1, 3);  // nothing passes: not written

  FilterJobOptions o;
  o.shards = {dir + "/part-0.tar", dir + "/part-1.tar", dir + "/part-2.tar", dir + "/missing.tar"};
  o.out_dir = dir + "/out";
  o.config.min_width = o.config.min_height = 32;
  o.config.max_aspect_ratio = 3;
  o.config.min_caption_chars = 5;
  o.threads = 2;
  ASSERT_TRUE(add_where_rule(o.config, "similarity>=0.28").ok());
  uint64_t last_progress = 0;
  o.progress = [&](uint64_t n) { last_progress = n; };
  auto report = run_filter_job(o);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  const FilterCounters& c = report->counters;
  EXPECT_EQ(c.total(), 11u);
  EXPECT_EQ(last_progress, 11u);
  EXPECT_EQ(c.get(FilterReason::pass), 2u);
  EXPECT_EQ(c.get(FilterReason::image_too_small), 2u);
  EXPECT_EQ(c.get(FilterReason::aspect_ratio), 2u);
  EXPECT_EQ(c.get(FilterReason::caption_too_short), 1u);
  EXPECT_EQ(c.get(FilterReason::similarity), 1u);
  EXPECT_EQ(c.get(FilterReason::missing_field), 1u);
  EXPECT_EQ(c.get(FilterReason::bad_image_header), 1u);
  EXPECT_EQ(c.get(FilterReason::bad_json), 1u);
  EXPECT_EQ(report->rewrite.shards_written, 2u);
  EXPECT_EQ(report->rewrite.shards_empty, 1u);
  EXPECT_EQ(report->rewrite.shards_failed, 1u);  // missing.tar: reported, not fatal
  EXPECT_EQ(shard_keys(o.out_dir + "/part-0.tar"), (std::vector<std::string>{"a_good"}));
  EXPECT_EQ(shard_keys(o.out_dir + "/part-1.tar"), (std::vector<std::string>{"h_good"}));
  EXPECT_FALSE(std::filesystem::exists(o.out_dir + "/part-2.tar"));
  ASSERT_FALSE(report->examples[static_cast<size_t>(FilterReason::image_too_small)].empty());
  EXPECT_NE(report->examples[static_cast<size_t>(FilterReason::image_too_small)][0].find("b_small"), std::string::npos);
  const std::string text = report->to_text();
  EXPECT_NE(text.find("aspect_ratio"), std::string::npos) << text;
  std::ifstream in(o.out_dir + "/filter_report.json");
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["counters"]["pass"], 2);
  EXPECT_EQ(j["counters"]["similarity"], 1);
}

TEST(FilterJob, WhereRulesMapOntoThresholds) {
  FilterConfig c;
  ASSERT_TRUE(add_where_rule(c, "similarity >= 0.3").ok());
  ASSERT_TRUE(add_where_rule(c, "punsafe<0.5").ok());
  ASSERT_TRUE(add_where_rule(c, "aesthetic > 5").ok());
  ASSERT_TRUE(add_where_rule(c, "status == success").ok());
  EXPECT_DOUBLE_EQ(*c.min_similarity, 0.3);
  EXPECT_DOUBLE_EQ(*c.max_punsafe, 0.5);
  EXPECT_EQ(c.json_rules.size(), 2u);
  const Status bad = add_where_rule(c, "similarity ~ 3");
  EXPECT_FALSE(bad.ok());
  EXPECT_FALSE(add_where_rule(c, "").ok());
}

TEST(FilterJob, BadOptionsAreErrors) {
  FilterJobOptions o;
  EXPECT_FALSE(run_filter_job(o).ok());  // no shards
  o.shards = {"/nonexistent/x.tar"};
  EXPECT_FALSE(run_filter_job(o).ok());  // no output directory
  o.out_dir = testing::fresh_temp_dir("filter_bad") + "/out";
  o.config.min_width = -1;
  const auto r = run_filter_job(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
}

}  // namespace
}  // namespace vlm
