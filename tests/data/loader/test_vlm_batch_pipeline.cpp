// The training loader's image path and filters: pixels through image_pipeline equal the decode + resize + normalize
// they replaced (default options), the resize modes and max_pixels reach the pipeline, random_resized_crop is
// deterministic per sample, and configured filters drop samples before decoding, counted per reason, with the
// counts carried through state()/restore(); bad options fail at open() naming the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/image/transforms.h"
#include "data/io/tar.h"
#include "data/io/webdataset.h"
#include "data/loader/vlm_batch.h"
#include "data/tokenizer/bpe_trainer.h"
#include "data_test_util.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

Tokenizer caption_tokenizer() {
  std::vector<std::string> corpus = {"a photo of a cat", "a red bicycle near the river", "describe the image."};
  BpeTrainOptions o;
  o.vocab_size = 300;
  o.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<pad>"};
  return *train_bpe(corpus, o);
}

VlmDataOptions caption_options(const std::string& shard, int image_size) {
  VlmDataOptions o;
  o.shards = {shard};
  o.task = "caption";
  o.image_size = image_size;
  o.image_tokens = 4;
  o.epochs = 1;
  o.shuffle_shards = false;
  o.chat = *chat_template_by_name("plain");
  return o;
}

struct ShardSample {
  Image image;
  std::string caption;
  std::string json;
};

std::string write_caption_shard(const std::string& path, const std::vector<ShardSample>& samples) {
  auto w = TarWriter::create(path);
  EXPECT_TRUE(w.ok());
  for (size_t i = 0; i < samples.size(); ++i) {
    const std::string key = str("00000", i);
    EXPECT_TRUE((*w)->add(key + ".jpg", *encode_jpeg(samples[i].image, 88)).ok());
    EXPECT_TRUE((*w)->add(key + ".txt", samples[i].caption).ok());
    if (!samples[i].json.empty()) {
      EXPECT_TRUE((*w)->add(key + ".json", samples[i].json).ok());
    }
  }
  EXPECT_TRUE((*w)->close().ok());
  return path;
}

// Images large enough that DCT scaling would apply (>= 2x the output): the default must not use it.
std::vector<ShardSample> photos(int n) {
  std::vector<ShardSample> v;
  for (int i = 0; i < n; ++i)
    v.push_back({testing::test_image(90 + 13 * i, 70 + 7 * i, static_cast<uint32_t>(i)), "a photo of a cat", ""});
  return v;
}

TEST(VlmBatchPipeline, DefaultPixelsEqualDecodeResizeNormalize) {
  const std::string dir = testing::scratch_dir("batchpipe_default");
  const auto samples = photos(4);
  const std::string shard = write_caption_shard(dir + "/a.tar", samples);
  const VlmDataOptions o = caption_options(shard, 24);
  auto loader = VlmBatchLoader::open(o, caption_tokenizer());
  ASSERT_TRUE(loader.ok()) << loader.status().to_string();
  auto b = (*loader)->next_batch(4);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  ASSERT_EQ(b->n_samples, 4);
  const size_t plane = 3 * 24 * 24;
  for (size_t i = 0; i < 4; ++i) {
    // What the loader did before the pipeline: full decode, shorter side + centre crop, normalize.
    const auto jpeg = *encode_jpeg(samples[i].image, 88);
    const Image ref = resize_shorter_then_center_crop(*decode_image(jpeg), 24, ResizeFilter::bicubic);
    std::vector<float> want(plane);
    to_chw_normalized(ref, o.mean, o.std, want.data());
    const float* got = b->images.data<float>() + i * plane;
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got)) << "sample " << i;
  }
}

TEST(VlmBatchPipeline, ModesAndDctScalingReachThePipeline) {
  const std::string dir = testing::scratch_dir("batchpipe_modes");
  const auto samples = photos(3);
  const std::string shard = write_caption_shard(dir + "/a.tar", samples);
  const Tokenizer tok = caption_tokenizer();
  for (const char* mode : {"border_pad", "random_resized_crop"})
    for (bool dct : {false, true}) {
      SCOPED_TRACE(str(mode, dct ? " dct" : " full"));
      VlmDataOptions o = caption_options(shard, 20);
      o.resize_mode = mode;
      o.dct_scaling = dct;
      o.seed = 5;
      auto loader = VlmBatchLoader::open(o, tok);
      ASSERT_TRUE(loader.ok()) << loader.status().to_string();
      auto b = (*loader)->next_batch(3);
      ASSERT_TRUE(b.ok()) << b.status().to_string();
      ASSERT_EQ(b->n_samples, 3);
      // Each image equals prepare_sample's (same seed and ordinal), which equals image_pipeline_sample with the
      // documented options; border_pad leaves white (normalized 1.0) bands on these non-square images.
      auto reader = WebDatasetReader::open(shard);
      ASSERT_TRUE(reader.ok());
      WebDatasetSample s;
      for (uint64_t i = 0; i < 3; ++i) {
        ASSERT_TRUE(*(*reader)->next(s));
        auto p = prepare_sample(s, o, i);
        ASSERT_TRUE(p.ok()) << p.status().to_string();
        const float* got = b->images.data<float>() + i * 3 * 20 * 20;
        EXPECT_TRUE(std::equal(p->pixels.begin(), p->pixels.end(), got)) << "sample " << i;
        if (std::string(mode) == "border_pad") {
          EXPECT_EQ(got[0], 1.f);  // top-left pad pixel, R
        }
        // The pipeline with a fresh loader gives the same window: deterministic per (seed, ordinal).
        auto again = prepare_sample(s, o, i);
        EXPECT_EQ(again->pixels, p->pixels);
      }
      // A different seed draws other random_resized_crop windows.
      if (std::string(mode) == "random_resized_crop") {
        auto first = WebDatasetReader::open(shard);
        ASSERT_TRUE(first.ok());
        ASSERT_TRUE(*(*first)->next(s));
        VlmDataOptions other = o;
        other.seed = 6;
        EXPECT_NE(prepare_sample(s, other, 0)->pixels, prepare_sample(s, o, 0)->pixels);
      }
    }
}

TEST(VlmBatchPipeline, MaxPixelsSkipsLargeImagesAsBadImages) {
  const std::string dir = testing::scratch_dir("batchpipe_bomb");
  const std::string shard = write_caption_shard(dir + "/a.tar", photos(3));  // 90x70, 103x77, 116x84
  VlmDataOptions o = caption_options(shard, 16);
  o.max_pixels = 103 * 77;
  auto loader = VlmBatchLoader::open(o, caption_tokenizer());
  ASSERT_TRUE(loader.ok());
  auto b = (*loader)->next_batch(3);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->n_samples, 2);
  EXPECT_EQ((*loader)->counters().bad_images, 1u);
  EXPECT_EQ((*loader)->counters().samples_skipped, 1u);
}

TEST(VlmBatchPipeline, FiltersDropSamplesAndCountEachReason) {
  const std::string dir = testing::scratch_dir("batchpipe_filters");
  std::vector<ShardSample> v = {
      {testing::test_image(60, 50, 1), "a  photo\tof a cat ", R"({"similarity": 0.31, "punsafe": 0.1})"},  // kept
      {testing::test_image(60, 50, 2), "a photo of a cat", R"({"similarity": 0.20, "punsafe": 0.1})"},     // sim
      {testing::test_image(60, 50, 3), "a photo of a cat", R"({"similarity": 0.40, "punsafe": 0.7})"},     // unsafe
      {testing::test_image(20, 15, 4), "a photo of a cat", R"({"similarity": 0.40, "punsafe": 0.1})"},     // small
      {testing::test_image(60, 50, 5), "a photo of a cat", R"({"punsafe": 0.1})"},                         // missing
      {testing::test_image(60, 50, 6), "a red bicycle near the river", R"({"similarity": 0.29, "punsafe": 0.49})"},
  };
  const std::string shard = write_caption_shard(dir + "/a.tar", v);
  VlmDataOptions o = caption_options(shard, 16);
  FilterConfig f;
  f.min_width = f.min_height = 32;
  f.min_similarity = 0.28;
  f.max_punsafe = 0.5;
  o.filters = f;
  const Tokenizer tok = caption_tokenizer();
  auto loader = VlmBatchLoader::open(o, tok);
  ASSERT_TRUE(loader.ok()) << loader.status().to_string();
  auto b = (*loader)->next_batch(3);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->n_samples, 1);
  // The kept caption is the cleaned one (whitespace runs collapsed, ends trimmed).
  std::vector<int32_t> answer;
  for (size_t i = 0; i < b->loss_rows.size(); ++i) answer.push_back(b->loss_targets[i]);
  EXPECT_EQ(tok.decode(answer), "a photo of a cat<|im_end|>");
  const std::string state = (*loader)->state();
  auto b2 = (*loader)->next_batch(3);
  ASSERT_TRUE(b2.ok());
  EXPECT_EQ(b2->n_samples, 1);
  const LoaderCounters c = (*loader)->counters();
  EXPECT_EQ(c.slots, 6u);
  EXPECT_EQ(c.samples_ok, 2u);
  EXPECT_EQ(c.samples_filtered, 4u);
  EXPECT_EQ(c.samples_skipped, 0u);
  EXPECT_EQ(c.slots, c.samples_ok + c.samples_skipped + c.samples_filtered);
  EXPECT_EQ(c.filter.total(), 6u);
  EXPECT_EQ(c.filter.get(FilterReason::pass), 2u);
  EXPECT_EQ(c.filter.get(FilterReason::similarity), 1u);
  EXPECT_EQ(c.filter.get(FilterReason::punsafe), 1u);
  EXPECT_EQ(c.filter.get(FilterReason::image_too_small), 1u);
  EXPECT_EQ(c.filter.get(FilterReason::missing_field), 1u);

  // The counters travel with the loader state.
  auto resumed = VlmBatchLoader::open(o, tok);
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE((*resumed)->restore(state).ok());
  EXPECT_EQ((*resumed)->counters().samples_filtered, 2u);
  EXPECT_EQ((*resumed)->counters().filter.get(FilterReason::similarity), 1u);
  auto rb = (*resumed)->next_batch(3);
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->tokens, b2->tokens);
  EXPECT_EQ((*resumed)->counters().filter.counts, c.filter.counts);
  EXPECT_EQ(nlohmann::json::parse(state)["counters"]["filter"]["punsafe"].get<int>(), 1);

  // Without filters nothing is dropped and no filter count moves.
  VlmDataOptions plain = o;
  plain.filters.reset();
  auto unfiltered = VlmBatchLoader::open(plain, tok);
  ASSERT_TRUE(unfiltered.ok());
  EXPECT_EQ((*unfiltered)->next_batch(6)->n_samples, 6);
  EXPECT_EQ((*unfiltered)->counters().filter.total(), 0u);
  EXPECT_EQ((*unfiltered)->counters().samples_filtered, 0u);
}

TEST(VlmBatchPipeline, BadOptionsFailAtOpenNamingTheField) {
  const std::string dir = testing::scratch_dir("batchpipe_opts");
  const std::string shard = write_caption_shard(dir + "/a.tar", photos(1));
  const Tokenizer tok = caption_tokenizer();
  VlmDataOptions o = caption_options(shard, 16);
  o.resize_mode = "stretch";
  auto a = VlmBatchLoader::open(o, tok);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("resize_mode"), std::string::npos) << a.status().message();
  o = caption_options(shard, 16);
  o.resize = "lanczos";
  auto b = VlmBatchLoader::open(o, tok);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("lanczos"), std::string::npos) << b.status().message();
  o = caption_options(shard, 16);
  o.max_pixels = 0;
  EXPECT_FALSE(VlmBatchLoader::open(o, tok).ok());
  o = caption_options(shard, 16);
  FilterConfig f;
  f.min_width = 100;
  f.max_width = 50;
  o.filters = f;
  auto c = VlmBatchLoader::open(o, tok);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::invalid_argument);
}

}  // namespace
}  // namespace vlm

namespace vlm {
namespace {

// A qa entry may carry the human answers instead of one answer (VQA annotations): the most frequent is trained on.
TEST(VlmBatchPipeline, QaAnswersListTrainsOnTheMostFrequentAnswer) {
  auto with_json = [](const std::string& json) {
    WebDatasetSample s;
    s.shard = "s.tar";
    s.key = "k";
    const std::vector<uint8_t> jpg = *encode_jpeg(testing::test_image(24, 24, 1), 90);
    s.fields["jpg"] = jpg;
    s.fields["json"] = std::vector<uint8_t>(json.begin(), json.end());
    return s;
  };
  VlmDataOptions o = caption_options("unused.tar", 16);
  o.task = "vqa";
  auto p = prepare_sample(with_json(R"({"qa": [{"question": "q?", "answers": ["b", {"answer": "a"}, "a", "b", "b"]},
                                             {"question": "r?", "answer": "", "answers": ["x"]}]})"), o, 0);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->turns.size(), 2u);
  for (const Turn& t : p->turns) EXPECT_EQ(t.assistant, t.user == "q?" ? "b" : "");  // "answer" wins when present
  for (const char* bad : {R"({"qa": [{"question": "q?", "answers": []}]})", R"({"qa": [{"question": "q?", "answers": [1]}]})",
                          R"({"qa": [{"question": "q?", "answers": "a"}]})", R"({"qa": [{"question": "q?"}]})"}) {
    auto r = prepare_sample(with_json(bad), o, 0);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("s.tar: k.json"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("\"answers\""), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace vlm
