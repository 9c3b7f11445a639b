// ShardSampleStream: epochs and shard shuffling, exact resume from any position, corrupt shards and bad samples
// skipped and counted, termination when nothing is readable.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/io/tar.h"
#include "data/loader/sample_stream.h"
#include "data_test_util.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

// Shard s holds sizes[s] samples; sample i has key "s<s>_<i>" and fields txt (the key) and cls.
std::vector<std::string> make_shards(const std::string& dir, const std::vector<int>& sizes) {
  std::vector<std::string> paths;
  for (size_t s = 0; s < sizes.size(); ++s) {
    const std::string path = str(dir, "/shard-", s, ".tar");
    auto w = TarWriter::create(path);
    VLM_CHECK(w.ok(), w.status().to_string());
    for (int i = 0; i < sizes[s]; ++i) {
      const std::string key = str("s", s, "_", i);
      VLM_CHECK((*w)->add(key + ".txt", std::string_view(key)).ok(), "add");
      VLM_CHECK((*w)->add(key + ".cls", std::string_view(str(i % 3))).ok(), "add");
    }
    VLM_CHECK((*w)->close().ok(), "close");
    paths.push_back(path);
  }
  return paths;
}

// Reads up to `limit` samples; returns their keys (and the last position through *pos).
std::vector<std::string> drain(ShardSampleStream& stream, size_t limit = SIZE_MAX, StreamPosition* pos = nullptr) {
  std::vector<std::string> keys;
  WebDatasetSample s;
  while (keys.size() < limit) {
    auto more = stream.next(s);
    EXPECT_TRUE(more.ok()) << more.status().to_string();
    if (!more.ok() || !*more) break;
    keys.push_back(s.text("txt"));
    EXPECT_EQ(s.key, keys.back());
  }
  if (pos) *pos = stream.position();
  return keys;
}

std::unique_ptr<ShardSampleStream> make_stream(const std::vector<std::string>& shards, ShardStreamOptions o) {
  auto s = ShardSampleStream::create(shards, o);
  VLM_CHECK(s.ok(), s.status().to_string());
  return std::move(s).value();
}

TEST(SampleStream, EpochsVisitEverySampleOnceInShuffledShardOrder) {
  const auto shards = make_shards(testing::scratch_dir("stream_epochs"), {5, 1, 7, 3});
  ShardStreamOptions o;
  o.epochs = 3;
  o.seed = 11;
  auto stream = make_stream(shards, o);
  const auto keys = drain(*stream);
  ASSERT_EQ(keys.size(), 48u);
  std::vector<std::vector<size_t>> orders;
  for (uint64_t e = 0; e < 3; ++e) {
    const auto order = stream->shard_order(e);
    orders.push_back(order);
    std::vector<std::string> expected;
    const int sizes[] = {5, 1, 7, 3};
    for (size_t s : order)
      for (int i = 0; i < sizes[s]; ++i) expected.push_back(str("s", s, "_", i));
    EXPECT_EQ(std::vector<std::string>(keys.begin() + 16 * e, keys.begin() + 16 * (e + 1)), expected) << e;
  }
  EXPECT_TRUE(orders[0] != orders[1] || orders[1] != orders[2]) << "shard order should change across epochs";
  const auto c = stream->counters();
  EXPECT_EQ(c.samples_ok, 48u);
  EXPECT_EQ(c.shards_completed, 12u);
  EXPECT_EQ(c.shards_failed, 0u);
  EXPECT_GT(c.bytes_read, 0u);

  o.shuffle_shards = false;
  o.epochs = 2;
  auto ordered = make_stream(shards, o);
  const auto keys2 = drain(*ordered);
  ASSERT_EQ(keys2.size(), 32u);
  EXPECT_EQ(keys2[0], "s0_0");
  EXPECT_EQ(keys2[5], "s1_0");
  EXPECT_EQ(keys2[16], "s0_0");
}

TEST(SampleStream, ResumeFromEveryPositionMatchesUninterrupted) {
  const auto shards = make_shards(testing::scratch_dir("stream_resume"), {5, 1, 7, 3});
  ShardStreamOptions o;
  o.epochs = 3;
  o.seed = 4;
  const auto full = drain(*make_stream(shards, o));
  ASSERT_EQ(full.size(), 48u);
  for (size_t n = 0; n <= full.size(); ++n) {
    StreamPosition pos;
    auto first = make_stream(shards, o);
    ASSERT_EQ(drain(*first, n, &pos).size(), n);
    // Through JSON, as a checkpoint would store it.
    auto restored = StreamPosition::parse(pos.to_string());
    ASSERT_TRUE(restored.ok());
    ASSERT_EQ(*restored, pos);
    ShardStreamOptions ro = o;
    ro.start = *restored;
    const auto rest = drain(*make_stream(shards, ro));
    EXPECT_EQ(rest, std::vector<std::string>(full.begin() + static_cast<std::ptrdiff_t>(n), full.end())) << "n=" << n;
  }
}

TEST(SampleStream, CorruptShardInTheMiddleIsSkippedAndCounted) {
  const std::string dir = testing::scratch_dir("stream_corrupt");
  auto shards = make_shards(dir, {3, 6, 2});
  // Cut shard 1 inside its 4th sample: 3 complete samples survive (each sample = 2 members = 4 blocks).
  auto bytes = testing::read_bytes(shards[1]);
  bytes.resize(512 * 4 * 3 + 512 + 100);
  testing::write_bytes(shards[1], bytes);
  shards.insert(shards.begin() + 2, dir + "/missing.tar");
  ShardStreamOptions o;
  o.shuffle_shards = false;
  o.epochs = 2;
  auto stream = make_stream(shards, o);
  const auto keys = drain(*stream);
  const std::vector<std::string> epoch = {"s0_0", "s0_1", "s0_2", "s1_0", "s1_1", "s1_2", "s2_0", "s2_1"};
  std::vector<std::string> expected = epoch;
  expected.insert(expected.end(), epoch.begin(), epoch.end());
  EXPECT_EQ(keys, expected);
  const auto c = stream->counters();
  EXPECT_EQ(c.samples_ok, 16u);
  EXPECT_EQ(c.shards_failed, 4u);  // the truncated one and the missing one, twice
  EXPECT_EQ(c.shards_completed, 4u);

  // Resume inside the corrupt shard and right after it.
  for (size_t n : {4u, 5u, 6u, 7u}) {
    StreamPosition pos;
    auto first = make_stream(shards, o);
    drain(*first, n, &pos);
    ShardStreamOptions ro = o;
    ro.start = pos;
    EXPECT_EQ(drain(*make_stream(shards, ro)), std::vector<std::string>(keys.begin() + n, keys.end())) << n;
  }
}

TEST(SampleStream, BadSamplesAreSkippedCountedAndResumable) {
  const std::string path = testing::scratch_dir("stream_bad_sample") + "/dup.tar";
  auto w = TarWriter::create(path);
  ASSERT_TRUE(w.ok());
  for (const char* name : {"a.txt", "b.txt", "b.txt", "c.txt"})
    ASSERT_TRUE((*w)->add(name, std::string_view(std::string(name).substr(0, 1))).ok());
  ASSERT_TRUE((*w)->close().ok());
  ShardStreamOptions o;
  auto stream = make_stream({path}, o);
  EXPECT_EQ(drain(*stream), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(stream->counters().samples_skipped, 1u);
  StreamPosition pos;
  auto first = make_stream({path}, o);
  drain(*first, 1, &pos);
  EXPECT_EQ(pos.sample_in_shard, 1u);
  o.start = pos;
  EXPECT_EQ(drain(*make_stream({path}, o)), (std::vector<std::string>{"c"}));
}

TEST(SampleStream, NothingReadableIsAnErrorNotAnEndlessLoop) {
  const std::string dir = testing::scratch_dir("stream_dead");
  testing::write_bytes(dir + "/junk.tar", std::vector<uint8_t>(3000, 0x41));
  ShardStreamOptions o;
  o.epochs = 0;  // forever
  auto stream = make_stream({dir + "/junk.tar", dir + "/missing.tar"}, o);
  WebDatasetSample s;
  auto r = stream->next(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no sample"), std::string::npos) << r.status().message();
  EXPECT_EQ(stream->counters().shards_failed, 2u);
}

TEST(SampleStream, CreateValidatesAndPositionParsing) {
  EXPECT_EQ(ShardSampleStream::create({}).status().code(), StatusCode::invalid_argument);
  ShardStreamOptions o;
  o.start.shard_cursor = 3;
  EXPECT_EQ(ShardSampleStream::create({"a.tar", "b.tar"}, o).status().code(), StatusCode::invalid_argument);
  EXPECT_FALSE(StreamPosition::parse("not json").ok());
  EXPECT_FALSE(StreamPosition::parse("{\"epoch\": 1, \"shard_cursor\": 2}").ok());
  auto neg = StreamPosition::parse("{\"epoch\": -1, \"shard_cursor\": 2, \"sample_in_shard\": 0}");
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.status().message().find("epoch"), std::string::npos);
  auto p = StreamPosition::parse("{\"epoch\": 2, \"shard_cursor\": 1, \"sample_in_shard\": 40}");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, (StreamPosition{2, 1, 40}));
}

TEST(SampleStream, DecodeImageHelper) {
  const std::string path = testing::scratch_dir("stream_images") + "/img.tar";
  auto w = TarWriter::create(path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->add("good.png", *encode_png(testing::test_image(8, 6))).ok());
  ASSERT_TRUE((*w)->add("bad.jpg", std::string_view("not a jpeg")).ok());
  ASSERT_TRUE((*w)->add("none.txt", std::string_view("no image")).ok());
  ASSERT_TRUE((*w)->close().ok());
  auto stream = make_stream({path}, {});
  WebDatasetSample s;
  ASSERT_TRUE(*stream->next(s));
  auto good = stream->decode_image(s);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(good->width, 8);
  ASSERT_TRUE(*stream->next(s));
  auto bad = stream->decode_image(s);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("img.tar"), std::string::npos);
  EXPECT_NE(bad.status().message().find("'bad'"), std::string::npos) << bad.status().message();
  ASSERT_TRUE(*stream->next(s));
  EXPECT_EQ(decode_sample_image(s).status().code(), StatusCode::not_found);
  EXPECT_EQ(stream->counters().bad_images, 1u);
}

}  // namespace
}  // namespace vlm
