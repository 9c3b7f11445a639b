// webdataset grouping: key/field split, grouping, skipping, duplicate fields, truncated shards.
#include <gtest/gtest.h>

#include "data/io/webdataset.h"
#include "data_test_util.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

using testing::append;
using testing::tar_end;
using testing::tar_member;

std::unique_ptr<WebDatasetReader> reader_for(std::vector<uint8_t> bytes) {
  return std::make_unique<WebDatasetReader>(
      std::make_unique<TarReader>(std::make_unique<MemorySource>(std::move(bytes), "shard.tar")));
}

TEST(WebDataset, SplitName) {
  std::string key, field;
  ASSERT_TRUE(webdataset_split_name("dir/000042.seg.PNG", key, field));
  EXPECT_EQ(key, "dir/000042");
  EXPECT_EQ(field, "seg.png");
  ASSERT_TRUE(webdataset_split_name("a.b/c.JPG", key, field));
  EXPECT_EQ(key, "a.b/c");
  EXPECT_EQ(field, "jpg");
  ASSERT_TRUE(webdataset_split_name("000001.txt", key, field));
  EXPECT_EQ(key, "000001");
  EXPECT_EQ(field, "txt");
  EXPECT_FALSE(webdataset_split_name("README", key, field));
  EXPECT_FALSE(webdataset_split_name("dir/.hidden", key, field));
  EXPECT_FALSE(webdataset_split_name("trailing.", key, field));
}

TEST(WebDataset, GroupsConsecutiveMembers) {
  std::vector<uint8_t> tar = tar_member("0001.jpg", "J1");
  append(tar, tar_member("0001.txt", "caption one"));
  append(tar, tar_member("0001.JSON", "{}"));
  append(tar, tar_member("README", "ignored"));
  append(tar, tar_member("0002.txt", "caption two"));
  append(tar, tar_member("dir/0003.seg.png", "S3"));
  append(tar, tar_member("dir/0003.jpg", "J3"));
  append(tar, tar_member("0001.txt", "same key again, later: a new sample"));
  append(tar, tar_end());
  auto reader = reader_for(tar);
  WebDatasetSample s;
  std::vector<std::string> keys;
  ASSERT_TRUE(*reader->next(s));
  EXPECT_EQ(s.shard, "shard.tar");
  EXPECT_EQ(s.key, "0001");
  EXPECT_EQ(s.index_in_shard, 0u);
  EXPECT_EQ(s.fields.size(), 3u);
  EXPECT_EQ(s.text("txt"), "caption one");
  EXPECT_EQ(s.text("json"), "{}");
  ASSERT_NE(s.get("jpg"), nullptr);
  EXPECT_EQ(s.get("png"), nullptr);
  ASSERT_TRUE(*reader->next(s));
  EXPECT_EQ(s.key, "0002");
  EXPECT_EQ(s.fields.size(), 1u);
  ASSERT_TRUE(*reader->next(s));
  EXPECT_EQ(s.key, "dir/0003");
  EXPECT_EQ(s.text("seg.png"), "S3");
  EXPECT_EQ(s.text("jpg"), "J3");
  EXPECT_EQ(s.index_in_shard, 2u);
  ASSERT_TRUE(*reader->next(s));
  EXPECT_EQ(s.key, "0001");
  EXPECT_EQ(s.index_in_shard, 3u);
  EXPECT_FALSE(*reader->next(s));
  EXPECT_FALSE(*reader->next(s));
  EXPECT_FALSE(reader->failed());
  EXPECT_EQ(reader->samples_consumed(), 4u);
}

TEST(WebDataset, SkipCountsLikeNext) {
  std::vector<uint8_t> tar;
  for (int i = 0; i < 5; ++i) {
    append(tar, tar_member(str("k", i, ".txt"), str("t", i)));
    append(tar, tar_member(str("k", i, ".cls"), str(i)));
  }
  append(tar, tar_end());
  auto reader = reader_for(tar);
  EXPECT_EQ(*reader->skip(2), 2u);
  WebDatasetSample s;
  ASSERT_TRUE(*reader->next(s));
  EXPECT_EQ(s.key, "k2");
  EXPECT_EQ(s.text("txt"), "t2");  // the first member of the sample after the skip still has its body
  EXPECT_EQ(s.index_in_shard, 2u);
  EXPECT_EQ(*reader->skip(10), 2u);
  EXPECT_FALSE(*reader->next(s));
}

TEST(WebDataset, DuplicateFieldIsASampleError) {
  std::vector<uint8_t> tar = tar_member("a.txt", "1");
  append(tar, tar_member("a.txt", "2"));
  append(tar, tar_member("b.txt", "3"));
  append(tar, tar_end());
  auto reader = reader_for(tar);
  WebDatasetSample s;
  auto first = reader->next(s);
  ASSERT_FALSE(first.ok());
  EXPECT_NE(first.status().message().find("'a'"), std::string::npos) << first.status().message();
  EXPECT_NE(first.status().message().find("shard.tar"), std::string::npos);
  EXPECT_FALSE(reader->failed());
  ASSERT_TRUE(*reader->next(s));
  EXPECT_EQ(s.key, "b");
  EXPECT_EQ(s.index_in_shard, 1u);  // the bad sample still counts
}

TEST(WebDataset, TruncatedShardDropsThePartialSample) {
  std::vector<uint8_t> tar = tar_member("a.jpg", "AAAA");
  append(tar, tar_member("a.txt", "a"));
  append(tar, tar_member("b.jpg", std::string(2000, 'B')));
  append(tar, tar_member("b.txt", "b"));
  tar.resize(512 * 4 + 700);  // inside b.jpg's body
  auto reader = reader_for(tar);
  WebDatasetSample s;
  ASSERT_TRUE(*reader->next(s));
  EXPECT_EQ(s.key, "a");
  EXPECT_EQ(s.fields.size(), 2u);
  auto broken = reader->next(s);
  ASSERT_FALSE(broken.ok());
  EXPECT_TRUE(reader->failed());
  EXPECT_NE(broken.status().message().find("b.jpg"), std::string::npos) << broken.status().message();
  EXPECT_FALSE(reader->next(s).ok());
  EXPECT_FALSE(reader->skip(1).ok());
}

}  // namespace
}  // namespace vlm
