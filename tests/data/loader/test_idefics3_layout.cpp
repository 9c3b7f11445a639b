// Idefics3 / SmolVLM image geometry and prompt: hand-derived from transformers' arithmetic (longest edge to 2048 with
// the other side truncated and made even, sides rounded up to 512-multiples, ceil splits), SmolVLM's
// preprocessor_config.json, and the prompt layout.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "data/loader/idefics3_layout.h"

namespace vlm {
namespace {

TEST(Idefics3Layout, HandDerivedGrids) {
  Idefics3Options o;  // SmolVLM-256M: longest_edge 2048, tiles of 512
  Idefics3Layout sq = idefics3_layout(512, 512, o);
  EXPECT_EQ(sq.resized_height, 2048);
  EXPECT_EQ(sq.rows, 4);
  EXPECT_EQ(sq.cols, 4);
  ASSERT_EQ(sq.tiles.size(), 16u);
  EXPECT_EQ(sq.tiles[5].x, 512);
  EXPECT_EQ(sq.tiles[5].y, 512);
  EXPECT_EQ(sq.tiles[5].width, 512);
  // 300 x 400 (h x w): w = 2048, h = int(2048 / (4/3)) = 1536 -> 3 rows of 4 tiles.
  Idefics3Layout wide = idefics3_layout(300, 400, o);
  EXPECT_EQ(wide.resized_width, 2048);
  EXPECT_EQ(wide.resized_height, 1536);
  EXPECT_EQ(wide.rows, 3);
  EXPECT_EQ(wide.cols, 4);
  // 1000 x 10: h = 2048, w = int(20.48) = 20 (even) -> rounded up to one 512 column.
  Idefics3Layout tall = idefics3_layout(1000, 10, o);
  EXPECT_EQ(tall.resized_width, 20);
  EXPECT_EQ(tall.split_width, 512);
  EXPECT_EQ(tall.rows, 4);
  EXPECT_EQ(tall.cols, 1);
  // 333 x 333 -> resized side made even: int(2048 / 1.0) = 2048; 301 x 401: h = int(2048 / (401/301)) = 1537 -> 1538.
  EXPECT_EQ(idefics3_layout(301, 401, o).resized_height, 1538);
  // Without resizing a small image is not split: only the global image.
  o.do_resize = false;
  Idefics3Layout small = idefics3_layout(100, 80, o);
  EXPECT_EQ(small.rows, 0);
  EXPECT_EQ(small.cols, 0);
  EXPECT_TRUE(small.tiles.empty());
  // Uneven tiles: 1000 x 700 without resize -> 1024 x 1024 after rounding, 2 x 2 tiles of 512.
  Idefics3Layout uneven = idefics3_layout(1000, 700, o);
  EXPECT_EQ(uneven.split_height, 1024);
  EXPECT_EQ(uneven.split_width, 1024);
  EXPECT_EQ(uneven.rows * uneven.cols, 4);
  o.do_image_splitting = false;
  Idefics3Layout global = idefics3_layout(1000, 700, o);
  EXPECT_EQ(global.rows, 0);
  EXPECT_EQ(global.split_height, 512);
}

TEST(Idefics3Layout, PromptString) {
  EXPECT_EQ(idefics3_image_prompt(0, 0, 2), "<fake_token_around_image><global-img><image><image><fake_token_around_image>");
  EXPECT_EQ(idefics3_image_prompt(2, 1, 1),
            "<fake_token_around_image><row_1_col_1><image>\n"
            "<fake_token_around_image><row_2_col_1><image>\n"
            "\n<fake_token_around_image><global-img><image><fake_token_around_image>");
}

TEST(Idefics3Layout, ReadsSmolVlmPreprocessorConfig) {
  std::ifstream in(std::string(VLM_HF_FIXTURES) + "/smolvlm/preprocessor_config.json");
  ASSERT_TRUE(in.good());
  std::stringstream buf;
  buf << in.rdbuf();
  Expected<Idefics3Options> o = Idefics3Options::from_preprocessor_config(nlohmann::json::parse(buf.str()), "pp.json");
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->longest_edge, 2048);
  EXPECT_EQ(o->max_image_size, 512);
  EXPECT_TRUE(o->do_image_splitting);
  Expected<Idefics3Options> bad =
      Idefics3Options::from_preprocessor_config(nlohmann::json::parse(R"({"max_image_size": {"longest_edge": 0}})"), "pp.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_image_size.longest_edge"), std::string::npos);
  EXPECT_FALSE(Idefics3Options::from_preprocessor_config(nlohmann::json::parse(R"({"size": 5})"), "pp.json").ok());
}

// transformers' own numbers (dev/fixtures/make_tokenizer_fixtures.py writes expected/idefics3_layout.json on a
// machine with transformers; the test skips until that file is in the fixtures).
TEST(Idefics3Layout, MatchesTransformers) {
  std::ifstream in(std::string(VLM_HF_FIXTURES) + "/expected/idefics3_layout.json");
  if (!in.good()) GTEST_SKIP() << "expected/idefics3_layout.json not generated yet";
  std::stringstream buf;
  buf << in.rdbuf();
  nlohmann::json ref = nlohmann::json::parse(buf.str());
  Expected<Idefics3Options> o = Idefics3Options::from_preprocessor_config(ref["preprocessor_config"], "ref");
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  ASSERT_GE(ref["cases"].size(), 10u);
  for (const auto& c : ref["cases"]) {
    Idefics3Layout l = idefics3_layout(c["height"], c["width"], *o);
    EXPECT_EQ(l.rows, c["rows"].get<int>()) << c.dump();
    EXPECT_EQ(l.cols, c["cols"].get<int>()) << c.dump();
    EXPECT_EQ(l.rows * l.cols + 1, c["frames"].get<int>()) << c.dump();
  }
  for (const auto& p : ref["prompts"]) {
    EXPECT_EQ(idefics3_image_prompt(p["rows"], p["cols"], p["image_seq_len"]), p["prompt"].get<std::string>());
  }
}

}  // namespace
}  // namespace vlm
