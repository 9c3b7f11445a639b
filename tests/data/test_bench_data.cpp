// `vlm bench data` run tiny, as the benchmark binary: --loader drains the real training loader over generated
// img2dataset-style shards (one decode thread, 1 batch) and reports a positive samples/s, its ratio to the
// consumption figure and the loader's timing in its JSON; bad flags exit 2.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "testing/test_util.h"

namespace {

using Result = vlm::testing::CommandResult;

Result run(const std::string& args) { return vlm::testing::run_command(BENCH_DATA_BINARY, args); }

TEST(BenchData, LoaderModeDrainsTheRealLoader) {
  const std::string dir = vlm::testing::scratch_dir("bench_data_loader");
  const std::string json = dir + "/loader.json";
  const Result r = run("--loader --images 12 --loader-shards 2 --min-side 64 --max-side 96 --size 32 --batch 4 "
                       "--batches 1 --threads 1 --pace 4 --consume 50000 --out " + dir + " --json-out " + json);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("VlmBatchLoader over 2 shard(s), 24 samples"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("samples/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--consume"), std::string::npos) << "the consumption figure's source is named: " << r.out;
  std::ifstream in(json);
  ASSERT_TRUE(in.good()) << json;
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["runs"].size(), 1u);
  const nlohmann::json& run0 = j["runs"][0];
  EXPECT_EQ(run0["decode_threads"], 1);
  EXPECT_EQ(run0["samples"], 4);
  EXPECT_GT(run0["samples_per_s"].get<double>(), 0.0);
  EXPECT_NEAR(run0["ratio_to_consume"].get<double>(), run0["samples_per_s"].get<double>() / 50000.0, 1e-9);
  EXPECT_GT(run0["decode_s"].get<double>(), 0.0);
  EXPECT_GE(run0["wait_s"].get<double>(), 0.0);
  EXPECT_GT(run0["paced_seconds"].get<double>(), 0.0);
  EXPECT_EQ(run0["samples_skipped"], 0);
  // The shards are kept: a second run reuses them (and 0 decode threads, the builder alone, works too).
  const Result again = run("--loader --images 12 --loader-shards 2 --min-side 64 --max-side 96 --size 32 --batch 4 "
                           "--batches 1 --threads 0 --pace 0 --out " + dir);
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_EQ(again.out.find("writing"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("default: a torch.compile nanoVLM-222M step"), std::string::npos)
      << "default consumption figure named: " << again.out;
}

TEST(BenchData, BadFlagsExit2) {
  EXPECT_EQ(run("--loader --batches 0").code, 2);
  EXPECT_EQ(run("--loader --consume -3").code, 2);
  EXPECT_EQ(run("--threads 0 --no-peer").code, 2);  // 0 is a --loader decode_threads value only
  EXPECT_EQ(run("--frobnicate").code, 2);
  const Result help = run("--help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("--loader"), std::string::npos);
}

}  // namespace
