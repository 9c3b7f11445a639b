// DataPlan and PartitionedSampleStream: equal shares for every rank at any world size and shard count, no sample
// twice per epoch, determinism, shuffle windows, resume at any slot, and counts from img2dataset's _stats.json.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "data/io/tar.h"
#include "data/loader/data_plan.h"
#include "data/loader/partitioned_stream.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

// Shards with the given sample counts; sample keys are "s<shard>_<i>".
std::vector<std::string> write_shards(const std::string& dir, const std::vector<int>& counts) {
  std::vector<std::string> out;
  for (size_t s = 0; s < counts.size(); ++s) {
    const std::string path = dir + "/shard-" + std::to_string(s) + ".tar";
    auto w = TarWriter::create(path);
    EXPECT_TRUE(w.ok());
    for (int i = 0; i < counts[s]; ++i) {
      const std::string key = "s" + std::to_string(s) + "_" + std::to_string(i);
      EXPECT_TRUE((*w)->add(key + ".txt", std::string("caption ") + key).ok());
    }
    EXPECT_TRUE((*w)->close().ok());
    out.push_back(path);
  }
  return out;
}

std::vector<std::string> read_epoch(const DataPlan& plan, uint64_t epoch, uint64_t window) {
  PartitionedSampleStream::Options o;
  o.epochs = epoch + 1;
  o.shuffle_window = window;
  o.start = {epoch, 0};
  auto s = PartitionedSampleStream::create(plan, o);
  EXPECT_TRUE(s.ok());
  std::vector<std::string> keys;
  Slot slot;
  while (*(*s)->next(slot)) {
    if (slot.epoch != epoch) break;
    EXPECT_TRUE(slot.ok) << slot.error;
    keys.push_back(slot.sample.key);
  }
  return keys;
}

TEST(DataPlan, EveryRankGetsAnEqualShareAtAnyWorldSize) {
  const std::string dir = testing::scratch_dir("plan_equal");
  const std::vector<int> sizes = {7, 13, 2, 9, 11};  // uneven, 42 samples
  const auto shards = write_shards(dir, sizes);
  auto counts = count_shard_samples(shards);
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(*counts, std::vector<uint64_t>(sizes.begin(), sizes.end()));
  for (int world = 1; world <= 8; ++world) {
    for (uint64_t epoch : {0, 1}) {
      std::set<std::string> seen;
      size_t per_rank = 0;
      for (int rank = 0; rank < world; ++rank) {
        auto plan = DataPlan::create(shards, *counts, 9, true, rank, world);
        ASSERT_TRUE(plan.ok());
        auto keys = read_epoch(*plan, epoch, 0);
        if (rank == 0) per_rank = keys.size();
        EXPECT_EQ(keys.size(), per_rank) << "world " << world << " rank " << rank;
        EXPECT_EQ(keys.size(), 42u / static_cast<size_t>(world));
        for (const auto& k : keys) EXPECT_TRUE(seen.insert(k).second) << k << " read twice in one epoch";
      }
      EXPECT_GE(seen.size(), 42u - static_cast<size_t>(world - 1));
    }
  }
}

TEST(DataPlan, OrderIsDeterministicAndShufflesPerEpoch) {
  const std::string dir = testing::scratch_dir("plan_order");
  const auto shards = write_shards(dir, {10, 10, 10, 10});
  std::vector<uint64_t> counts(4, 10);
  auto a = DataPlan::create(shards, counts, 1, true, 0, 1), b = DataPlan::create(shards, counts, 1, true, 0, 1);
  EXPECT_EQ(read_epoch(*a, 0, 7), read_epoch(*b, 0, 7));
  EXPECT_NE(read_epoch(*a, 0, 7), read_epoch(*a, 1, 7));
  EXPECT_NE(read_epoch(*a, 0, 0), read_epoch(*a, 0, 7));  // the window shuffle changes the order...
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(sorted(read_epoch(*a, 0, 0)), sorted(read_epoch(*a, 0, 7)));  // ...not the set
  auto unshuffled = DataPlan::create(shards, counts, 1, false, 0, 1);
  EXPECT_EQ(read_epoch(*unshuffled, 0, 0).front(), "s0_0");
}

TEST(DataPlan, ResumeAtEverySlotContinuesExactly) {
  const std::string dir = testing::scratch_dir("plan_resume");
  const auto shards = write_shards(dir, {5, 8, 3});
  auto plan = DataPlan::create(shards, {5, 8, 3}, 4, true, 1, 2);  // rank 1 of 2: 8 slots per epoch
  ASSERT_TRUE(plan.ok());
  PartitionedSampleStream::Options o;
  o.epochs = 3;
  o.shuffle_window = 3;
  auto full = PartitionedSampleStream::create(*plan, o);
  std::vector<std::pair<SlotPosition, std::string>> seq;  // position before each slot, key
  Slot slot;
  for (;;) {
    SlotPosition before = (*full)->position();
    auto more = (*full)->next(slot);
    ASSERT_TRUE(more.ok());
    if (!*more) break;
    seq.emplace_back(before, slot.sample.key);
  }
  ASSERT_EQ(seq.size(), 24u);
  for (size_t k = 0; k < seq.size(); ++k) {
    o.start = seq[k].first;
    if (o.start.index == 8) o.start = {o.start.epoch + 1, 0};
    auto resumed = PartitionedSampleStream::create(*plan, o);
    ASSERT_TRUE(resumed.ok());
    for (size_t j = k; j < seq.size(); ++j) {
      ASSERT_TRUE(*(*resumed)->next(slot));
      EXPECT_EQ(slot.sample.key, seq[j].second) << "resumed at " << k;
    }
    EXPECT_FALSE(*(*resumed)->next(slot));
  }
}

TEST(DataPlan, BrokenShardGivesBadSlotsNotFewer) {
  const std::string dir = testing::scratch_dir("plan_broken");
  auto shards = write_shards(dir, {6, 6});
  auto counts = *count_shard_samples(shards);
  std::remove(shards[0].c_str());  // vanished after counting
  auto plan = DataPlan::create(shards, counts, 0, false, 0, 1);
  PartitionedSampleStream::Options o;
  auto s = PartitionedSampleStream::create(*plan, o);
  Slot slot;
  int ok = 0, bad = 0;
  while (*(*s)->next(slot)) (slot.ok ? ok : bad)++;
  EXPECT_EQ(ok, 6);
  EXPECT_EQ(bad, 6);
  EXPECT_EQ((*s)->counters().shards_failed, 1u);
}

TEST(DataPlan, CountsFromImg2datasetStats) {
  const std::string dir = testing::scratch_dir("plan_stats");
  auto shards = write_shards(dir, {4});
  std::ofstream(dir + "/shard-0_stats.json") << "{\"count\": 10, \"successes\": 4, \"failed_to_download\": 6}";
  auto counts = count_shard_samples(shards);
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ((*counts)[0], 4u);
  EXPECT_FALSE(DataPlan::create(shards, {4}, 0, false, 2, 2).ok());   // rank out of range
  EXPECT_FALSE(DataPlan::create(shards, {4}, 0, false, 0, 5).ok());   // fewer samples than ranks
  EXPECT_FALSE(DataPlan::create(shards, {4, 1}, 0, false, 0, 1).ok());
}

}  // namespace
}  // namespace vlm
