// The run file's [data] and [filter] sections on their own: declared keys and defaults, the cross-key check, and the
// loader options built from them for training and for eval (filters, online dedup and shuffling are training's).
#include <gtest/gtest.h>

#include <fstream>

#include "data/loader/data_config.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

struct Sections {
  DataConfig data;
  DataFilterConfig filter;
  OptionSet options;
  Sections() { add_data_options(options, data, filter); }
};

const LoaderModelShape kShape{32, 16, 128, ""};

TEST(DataConfig, DeclaresEveryDataAndFilterKeyWithItsDefault) {
  Sections s;
  for (const char* key : {"data.train_shards", "data.val_shards", "data.tokenizer", "data.task", "data.max_turns",
                          "data.caption_prompt", "data.chat_template", "data.resize", "data.image_mean",
                          "data.image_std", "data.epochs", "data.shuffle_shards", "data.shuffle_window",
                          "data.decode_threads", "data.prefetch_batches", "data.resize_mode", "data.max_pixels",
                          "data.dct_scaling", "data.dedup_exact", "data.image_splitting", "data.longest_edge",
                          "filter.min_side", "filter.max_aspect_ratio",
                          "filter.min_caption_chars", "filter.max_caption_chars", "filter.min_similarity",
                          "filter.max_punsafe", "filter.max_pwatermark", "filter.rules", "filter.missing_field_fails"})
    EXPECT_TRUE(s.options.has(key)) << key;
  EXPECT_NE(s.options.help().find("data.shuffle_window"), std::string::npos);
  ASSERT_TRUE(s.options.load_toml_string("[data]\ntask = \"caption\"\nshuffle_window = 7\n[filter]\nmin_side = 9\n",
                                         "test.toml")
                  .ok());
  ASSERT_TRUE(s.options.set("data.decode_threads=3").ok());
  ASSERT_TRUE(s.options.validate().ok());
  EXPECT_EQ(s.data.task, "caption");
  EXPECT_EQ(s.data.shuffle_window, 7);
  EXPECT_EQ(s.data.decode_threads, 3);
  EXPECT_EQ(s.data.prefetch_batches, 2);  // untouched default
  EXPECT_EQ(s.filter.min_side, 9);
  EXPECT_TRUE(s.filter.any());
  ASSERT_TRUE(s.options.set("data.task=dance").ok());
  EXPECT_NE(s.options.validate().message().find("data.task: must be one of"), std::string::npos);
}

TEST(DataConfig, MeanAndStdNeedThreeValues) {
  DataConfig d;
  EXPECT_TRUE(d.validate().ok());
  d.image_std = {0.5f, 0.5f};
  const Status s = d.validate();
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_EQ(s.message(), "data.image_mean and data.image_std need 3 values");
}

TEST(DataConfig, TrainingOptionsFollowTheSections) {
  DataConfig d;
  d.task = "mixed";
  d.max_turns = 3;
  d.resize_mode = "random_resized_crop";
  d.image_mean = {0.1f, 0.2f, 0.3f};
  d.epochs = 4;
  d.shuffle_window = 64;
  d.decode_threads = 2;
  d.dedup_exact = true;
  d.chat_template = "plain";
  DataFilterConfig f;
  f.min_side = 16;
  f.min_similarity = 0.28;
  f.rules = {"aesthetic >= 5"};
  auto o = build_loader_options(d, f, kShape, 99, "a.tar::b.tar", false);
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->shards, (std::vector<std::string>{"a.tar", "b.tar"}));
  EXPECT_EQ(o->task, "mixed");
  EXPECT_EQ(o->max_turns, 3);
  EXPECT_EQ(o->image_size, 32);
  EXPECT_EQ(o->image_tokens, 16);
  EXPECT_EQ(o->max_seq_len, 128);
  EXPECT_EQ(o->seed, 99u);
  EXPECT_EQ(o->resize_mode, "random_resized_crop");
  EXPECT_FLOAT_EQ(o->mean[2], 0.3f);
  EXPECT_EQ(o->epochs, 4);
  EXPECT_TRUE(o->shuffle_shards);
  EXPECT_EQ(o->shuffle_window, 64u);
  EXPECT_EQ(o->decode_threads, 2);
  EXPECT_EQ(o->prefetch_batches, 2);
  EXPECT_TRUE(o->dedup_exact);
  EXPECT_EQ(o->chat.name, "plain");
  ASSERT_TRUE(o->filters.has_value());
  EXPECT_EQ(o->filters->min_width, 16);
  EXPECT_EQ(o->filters->min_height, 16);
  ASSERT_TRUE(o->filters->min_similarity.has_value());
  EXPECT_DOUBLE_EQ(*o->filters->min_similarity, 0.28);
  EXPECT_FALSE(o->filters->max_punsafe.has_value());  // < 0: off
  ASSERT_EQ(o->filters->json_rules.size(), 1u);
  EXPECT_EQ(o->filters->json_rules[0].to_string(), "aesthetic >= 5");

  // No filter on: none at all.
  o = build_loader_options(d, DataFilterConfig{}, kShape, 99, "a.tar", false);
  ASSERT_TRUE(o.ok());
  EXPECT_FALSE(o->filters.has_value());
}

TEST(DataConfig, EvalReadsOnePassInAFixedOrderWithoutFilters) {
  DataConfig d;
  d.epochs = 0;
  d.resize_mode = "border_pad";
  d.dedup_exact = true;
  DataFilterConfig f;
  f.min_side = 16;
  auto o = build_loader_options(d, f, kShape, 7, "val.tar", true);
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->epochs, 1);
  EXPECT_FALSE(o->shuffle_shards);
  EXPECT_EQ(o->shuffle_window, 0u);
  EXPECT_EQ(o->prefetch_batches, 0);
  EXPECT_EQ(o->resize_mode, "center_crop");
  EXPECT_FALSE(o->dedup_exact);
  EXPECT_FALSE(o->filters.has_value());
  EXPECT_EQ(o->decode_threads, d.decode_threads);
}

TEST(DataConfig, BadFiltersAndEmptyShardListsAreErrorsNamingTheKey) {
  DataConfig d;
  DataFilterConfig f;
  f.rules = {"aesthetic ~ 5"};
  auto o = build_loader_options(d, f, kShape, 1, "a.tar", false);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("filter.rules"), std::string::npos) << o.status().message();
  EXPECT_TRUE(build_loader_options(d, f, kShape, 1, "a.tar", true).ok());  // eval has no filters
  f.rules.clear();
  f.min_caption_chars = 10;
  f.max_caption_chars = 5;
  o = build_loader_options(d, f, kShape, 1, "a.tar", false);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("[filter]"), std::string::npos) << o.status().message();
  d.chat_template = "fancy";
  EXPECT_FALSE(build_loader_options(d, DataFilterConfig{}, kShape, 1, "a.tar", false).ok());
  d.chat_template = "chat";
  o = build_loader_options(d, DataFilterConfig{}, kShape, 1, "", false);
  EXPECT_FALSE(o.ok());
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A SmolVLM folder's preprocessor_config.json turns on Idefics3 tiling (training and eval), image_seq_len from
// processor_config.json; data.image_splitting and data.longest_edge override the file; other image processors, a
// missing file or a safetensors path leave it off; malformed files are errors naming them.
TEST(DataConfig, AnIdefics3ModelFolderTurnsOnTilingWithTheRunsOverrides) {
  const std::string dir = testing::scratch_dir("data_config_idefics3");
  write_text(dir + "/preprocessor_config.json",
             R"({"image_processor_type": "Idefics3ImageProcessor", "do_image_splitting": true,
                 "size": {"longest_edge": 1536}, "max_image_size": {"longest_edge": 32}})");
  write_text(dir + "/processor_config.json", R"({"image_seq_len": 16})");
  LoaderModelShape shape = kShape;
  shape.model_dir = dir;
  DataConfig d;
  auto o = build_loader_options(d, DataFilterConfig{}, shape, 1, "a.tar", false);
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  ASSERT_TRUE(o->idefics3.has_value());
  EXPECT_EQ(o->idefics3->longest_edge, 1536);
  EXPECT_EQ(o->idefics3->max_image_size, 32);
  EXPECT_EQ(o->idefics3->image_seq_len, 16);
  EXPECT_TRUE(o->idefics3->do_image_splitting);
  EXPECT_TRUE(build_loader_options(d, DataFilterConfig{}, shape, 1, "a.tar", true)->idefics3.has_value());  // eval

  Sections s;
  ASSERT_TRUE(s.options.load_toml_string("[data]\nimage_splitting = \"off\"\nlongest_edge = 512\n", "t.toml").ok());
  ASSERT_TRUE(s.options.validate().ok());
  EXPECT_NE(s.options.help().find("data.longest_edge"), std::string::npos);
  o = build_loader_options(s.data, DataFilterConfig{}, shape, 1, "a.tar", false);
  ASSERT_TRUE(o.ok() && o->idefics3.has_value());
  EXPECT_FALSE(o->idefics3->do_image_splitting);
  EXPECT_EQ(o->idefics3->longest_edge, 512);
  for (const char* bad : {"data.image_splitting=maybe", "data.longest_edge=-1", "data.longest_edge=5000"}) {
    Sections t;
    ASSERT_TRUE(t.options.set(bad).ok()) << bad;
    Status st = t.options.validate();
    EXPECT_NE(st.message().find(std::string(bad).substr(0, std::string(bad).find('='))), std::string::npos)
        << bad << ": " << st.message();
  }

  write_text(dir + "/preprocessor_config.json", R"({"image_processor_type": "SiglipImageProcessor"})");
  EXPECT_FALSE(build_loader_options(d, DataFilterConfig{}, shape, 1, "a.tar", false)->idefics3.has_value());
  shape.model_dir = dir + "/model.safetensors";
  EXPECT_FALSE(build_loader_options(d, DataFilterConfig{}, shape, 1, "a.tar", false)->idefics3.has_value());
  shape.model_dir = dir;
  write_text(dir + "/preprocessor_config.json", R"({"image_processor_type": "Idefics3ImageProcessor", "size": 7})");
  o = build_loader_options(d, DataFilterConfig{}, shape, 1, "a.tar", false);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("preprocessor_config.json: size"), std::string::npos) << o.status().message();
  write_text(dir + "/preprocessor_config.json", "{not json");
  o = build_loader_options(d, DataFilterConfig{}, shape, 1, "a.tar", false);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("preprocessor_config.json"), std::string::npos) << o.status().message();
}

}  // namespace
}  // namespace vlm
