// `vlm data build` and `vlm data inspect` as library calls: inputs from a folder, CSV and JSONL; unreadable images
// skipped and reported; shards in img2dataset's layout that the loader's data plan reads (via _stats.json);
// statistics and the contact sheet.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/io/shard_spec.h"
#include "data/loader/data_plan.h"
#include "data/loader/sample_stream.h"
#include "data/tools/dataset_build.h"
#include "data/tools/dataset_inspect.h"
#include "data_test_util.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

void write_image(const std::string& path, int w, int h, uint32_t seed) {
  Image img = testing::test_image(w, h, seed);
  auto bytes = path.size() > 4 && path.substr(path.size() - 4) == ".png" ? encode_png(img) : encode_jpeg(img, 90);
  testing::write_bytes(path, *bytes);
}

TEST(DataBuild, FolderToShardsWithStatsAndFailures) {
  const std::string dir = testing::scratch_dir("build_folder");
  std::filesystem::create_directories(dir + "/in/sub");
  write_image(dir + "/in/a.jpg", 64, 48, 1);
  std::ofstream(dir + "/in/a.txt") << "a red thing\n";
  write_image(dir + "/in/sub/b.png", 300, 200, 2);
  write_image(dir + "/in/c.jpg", 40, 40, 3);
  testing::write_bytes(dir + "/in/broken.jpg", {0xff, 0xd8, 0xff, 0x00, 0x12});  // not an image
  auto inputs = list_build_inputs(dir + "/in");
  ASSERT_TRUE(inputs.ok());
  ASSERT_EQ(inputs->size(), 4u);
  EXPECT_EQ((*inputs)[0].caption, "a red thing");
  BuildOptions o;
  o.out_dir = dir + "/out";
  o.samples_per_shard = 2;
  o.max_side = 100;
  o.threads = 2;
  auto r = build_shards(*inputs, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->written, 3u);
  EXPECT_EQ(r->failed, 1u);
  EXPECT_EQ(r->shards, 2u);
  ASSERT_EQ(r->failures.size(), 1u);
  EXPECT_NE(r->failures[0].find("broken.jpg"), std::string::npos);
  // The data plan reads the counts from the _stats.json files.
  auto shards = expand_shard_spec(o.out_dir);
  ASSERT_TRUE(shards.ok());
  auto counts = count_shard_samples(*shards);
  EXPECT_EQ(*counts, (std::vector<uint64_t>{1, 2}));  // sorted paths: shard 0: a, broken (failed); shard 1: c, sub/b
  // Samples carry image, caption and metadata; the large PNG was shrunk and re-encoded.
  ShardStreamOptions so;
  so.shuffle_shards = false;
  auto stream = ShardSampleStream::create(*shards, so);
  WebDatasetSample s;
  int n = 0;
  while (*(*stream)->next(s)) {
    auto j = nlohmann::json::parse(s.text("json"));
    EXPECT_EQ(j["key"], s.key);
    if (n == 2) {  // sub/b.png, shrunk to max_side and re-encoded
      EXPECT_TRUE(s.has("jpg"));
      EXPECT_EQ(j["width"], 100);
      EXPECT_EQ(j["height"], 67);
    }
    ++n;
  }
  EXPECT_EQ(n, 3);
}

TEST(DataBuild, CsvAndJsonlInputs) {
  const std::string dir = testing::scratch_dir("build_csv");
  write_image(dir + "/x.jpg", 32, 32, 4);
  std::ofstream(dir + "/list.csv") << "filepath,caption,source\nx.jpg,\"a, quoted \"\"caption\"\"\",web\n";
  auto csv = list_build_inputs(dir + "/list.csv");
  ASSERT_TRUE(csv.ok()) << csv.status().to_string();
  ASSERT_EQ(csv->size(), 1u);
  EXPECT_EQ((*csv)[0].caption, "a, quoted \"caption\"");
  EXPECT_EQ((*csv)[0].image_path, dir + "/x.jpg");
  EXPECT_NE((*csv)[0].extra_json.find("\"source\":\"web\""), std::string::npos);
  std::ofstream(dir + "/list.jsonl") << "{\"image\": \"x.jpg\", \"text\": \"hi\", \"similarity\": 0.3}\n\n";
  auto jl = list_build_inputs(dir + "/list.jsonl");
  ASSERT_TRUE(jl.ok());
  EXPECT_EQ((*jl)[0].caption, "hi");
  EXPECT_NE((*jl)[0].extra_json.find("similarity"), std::string::npos);
  // Malformed inputs name the file and the line.
  std::ofstream(dir + "/bad.csv") << "filepath,caption\nx.jpg\n";
  auto bad = list_build_inputs(dir + "/bad.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.csv:2"), std::string::npos) << bad.status().message();
  std::ofstream(dir + "/bad.jsonl") << "{\"caption\": \"no image\"}\n";
  EXPECT_NE(list_build_inputs(dir + "/bad.jsonl").status().message().find("bad.jsonl:1"), std::string::npos);
  std::ofstream(dir + "/nocol.csv") << "a,b\n1,2\n";
  EXPECT_FALSE(list_build_inputs(dir + "/nocol.csv").ok());
  EXPECT_FALSE(list_build_inputs(dir + "/missing.jsonl").ok());
}

TEST(DataInspect, StatisticsAndContactSheet) {
  const std::string dir = testing::scratch_dir("inspect");
  std::filesystem::create_directories(dir + "/in");
  for (int i = 0; i < 5; ++i) {
    write_image(dir + "/in/" + std::to_string(i) + ".jpg", 40 + 10 * i, 40, static_cast<uint32_t>(i));
    std::ofstream(dir + "/in/" + std::to_string(i) + ".txt") << std::string("word ") + std::string(i, 'x');
  }
  BuildOptions o;
  o.out_dir = dir + "/out";
  ASSERT_TRUE(build_shards(*list_build_inputs(dir + "/in"), o).ok());
  InspectOptions io;
  io.contact_sheet = dir + "/sheet.jpg";
  io.sheet_columns = io.sheet_rows = 2;
  io.thumb = 32;
  auto r = inspect_shards(*expand_shard_spec(o.out_dir), io);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->samples, 5u);
  EXPECT_EQ(r->formats.at("jpeg"), 5u);
  EXPECT_EQ(r->fields.at("txt"), 5u);
  EXPECT_EQ(r->width.min, 40);
  EXPECT_EQ(r->width.max, 80);
  EXPECT_EQ(r->height.p50, 40);
  EXPECT_EQ(r->caption_words.n, 5u);
  auto sheet = decode_image(testing::read_bytes(dir + "/sheet.jpg"));
  ASSERT_TRUE(sheet.ok());
  EXPECT_EQ(sheet->width, 64);
  EXPECT_NE(r->to_text().find("5 samples"), std::string::npos);
  EXPECT_NE(r->to_json().find("\"caption_chars\""), std::string::npos);
}

}  // namespace
}  // namespace vlm
