// The training-batch loader over real shards: packing and the loss mask, bad samples skipped and counted (never a
// crash), img2dataset-style captioning shards (jpg + txt), truncated shards, and exact resume from state().
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/io/tar.h"
#include "data/loader/vlm_batch.h"
#include "data/tokenizer/bpe_trainer.h"
#include "data/tools/synth_shapes.h"
#include "data_test_util.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

Tokenizer small_tokenizer() {
  std::vector<std::string> corpus = {"how many shapes are there? one two three", "a red circle and a blue square",
                                     "what color is the triangle? describe the image. a photo of a cat"};
  BpeTrainOptions o;
  o.vocab_size = 300;
  o.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<pad>"};
  return *train_bpe(corpus, o);
}

VlmDataOptions options(const std::vector<std::string>& shards, const std::string& task) {
  VlmDataOptions o;
  o.shards = shards;
  o.task = task;
  o.image_size = 16;
  o.image_tokens = 4;
  o.max_turns = 3;
  o.epochs = 1;
  o.shuffle_shards = false;
  o.chat = *chat_template_by_name("plain");
  return o;
}

// A shard of synthetic samples where sample `bad_jpeg` has a corrupt image and `bad_json` broken JSON.
std::string write_shard(const std::string& dir, int n, int bad_jpeg, int bad_json) {
  const std::string path = dir + "/s.tar";
  auto w = TarWriter::create(path);
  EXPECT_TRUE(w.ok());
  for (int i = 0; i < n; ++i) {
    SynthShapesSample s = synth_shapes_sample(5, static_cast<uint64_t>(i), 16);
    std::vector<uint8_t> jpg = *encode_jpeg(s.image, 90);
    if (i == bad_jpeg) jpg.resize(jpg.size() / 3);  // truncated JPEG
    std::string json = i == bad_json ? std::string("{\"qa\": [") : s.json();
    EXPECT_TRUE((*w)->add(s.key + ".jpg", jpg).ok());
    EXPECT_TRUE((*w)->add(s.key + ".json", json).ok());
  }
  EXPECT_TRUE((*w)->close().ok());
  return path;
}

TEST(VlmBatch, PacksSequencesWithTheLossOnAnswersOnly) {
  const std::string dir = testing::scratch_dir("batch_pack");
  const Tokenizer tok = small_tokenizer();
  auto loader = VlmBatchLoader::open(options({write_shard(dir, 6, -1, -1)}, "vqa"), tok);
  ASSERT_TRUE(loader.ok()) << loader.status().to_string();
  auto b = (*loader)->next_batch(4);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->n_samples, 4);
  EXPECT_EQ(b->images.shape(), Shape({4, 3, 16, 16}));
  ASSERT_EQ(b->cu_seqlens.size(), 5u);
  EXPECT_EQ(b->cu_seqlens.back(), static_cast<int32_t>(b->tokens.size()));
  EXPECT_EQ(b->image_rows.size(), 16u);
  const int32_t image_id = *tok.token_to_id("<image>"), end_id = *tok.token_to_id("<|im_end|>");
  for (int32_t r : b->image_rows) EXPECT_EQ(b->tokens[static_cast<size_t>(r)], image_id);
  // Every target is the next token; every turn's end marker is a target; no image row is a target.
  int ends = 0;
  for (size_t i = 0; i < b->loss_rows.size(); ++i) {
    EXPECT_EQ(b->loss_targets[i], b->tokens[static_cast<size_t>(b->loss_rows[i]) + 1]);
    EXPECT_NE(b->loss_targets[i], image_id);
    ends += b->loss_targets[i] == end_id;
  }
  EXPECT_GE(ends, 4);
  for (size_t s = 0; s < 4; ++s) EXPECT_EQ(b->positions[static_cast<size_t>(b->cu_seqlens[s])], 0);
}

TEST(VlmBatch, BadSamplesAreSkippedAndCounted) {
  const std::string dir = testing::scratch_dir("batch_bad");
  auto loader = VlmBatchLoader::open(options({write_shard(dir, 6, 1, 3)}, "vqa"), small_tokenizer());
  ASSERT_TRUE(loader.ok());
  auto b = (*loader)->next_batch(6);  // 6 slots, 4 good samples
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->n_samples, 4);
  const LoaderCounters c = (*loader)->counters();
  EXPECT_EQ(c.slots, 6u);
  EXPECT_EQ(c.samples_ok, 4u);
  EXPECT_EQ(c.samples_skipped, 2u);
  EXPECT_EQ(c.bad_images, 1u);
  EXPECT_EQ(c.bad_text, 1u);
  // The data is exhausted now: a clear error, not a hang.
  auto more = (*loader)->next_batch(1);
  ASSERT_FALSE(more.ok());
  EXPECT_NE(more.status().message().find("exhausted"), std::string::npos);
}

TEST(VlmBatch, TruncatedShardKeepsItsGoodSamplesAndMovesOn) {
  const std::string dir = testing::scratch_dir("batch_trunc");
  const std::string a = write_shard(dir, 6, -1, -1);
  auto bytes = testing::read_bytes(a);
  const std::string cut = dir + "/cut.tar";
  testing::write_bytes(cut, std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<long>(bytes.size() / 2)));
  auto loader = VlmBatchLoader::open(options({cut, a}, "vqa"), small_tokenizer());
  ASSERT_TRUE(loader.ok());
  int total = 0;
  for (;;) {
    auto b = (*loader)->next_batch(4);
    if (!b.ok()) break;
    total += b->n_samples;
  }
  EXPECT_GE(total, 6 + 1);  // all of the good shard plus what the cut one held before the break
  EXPECT_LT(total, 12);
  EXPECT_EQ((*loader)->counters().shards_failed, 1u);
}

TEST(VlmBatch, Img2datasetCaptionShards) {
  const std::string dir = testing::scratch_dir("batch_caption");
  const std::string path = dir + "/laion-000000.tar";
  {
    auto w = TarWriter::create(path);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 3; ++i) {
      const std::string key = "00000000" + std::to_string(i);
      Image img = testing::test_image(40 + 10 * i, 30, static_cast<uint32_t>(i));  // not square, not 16 px
      ASSERT_TRUE((*w)->add(key + ".jpg", *encode_jpeg(img, 85)).ok());
      ASSERT_TRUE((*w)->add(key + ".txt", std::string("a photo of a cat")).ok());
      ASSERT_TRUE((*w)->add(key + ".json", std::string("{\"url\": \"http://x\", \"similarity\": 0.31}")).ok());
    }
    ASSERT_TRUE((*w)->close().ok());
  }
  const Tokenizer tok = small_tokenizer();
  auto loader = VlmBatchLoader::open(options({path}, "caption"), tok);
  ASSERT_TRUE(loader.ok());
  auto b = (*loader)->next_batch(3);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->n_samples, 3);
  std::vector<int32_t> answer;
  for (size_t i = 0; i < b->loss_rows.size() && b->loss_rows[i] < b->cu_seqlens[1]; ++i)
    answer.push_back(b->loss_targets[i]);
  EXPECT_EQ(tok.decode(answer), "a photo of a cat<|im_end|>");
  // Without question/answer pairs the samples are skipped, not fatal: the batch is empty.
  auto vqa = VlmBatchLoader::open(options({path}, "vqa"), tok);
  auto empty = (*vqa)->next_batch(3);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->n_samples, 0);
  EXPECT_EQ((*vqa)->counters().bad_text, 3u);
  EXPECT_FALSE((*vqa)->next_batch(3).ok());  // one epoch only
}

TEST(VlmBatch, StateRestoresTheExactBatchSequence) {
  const std::string dir = testing::scratch_dir("batch_resume");
  const std::string shard = write_shard(dir, 20, -1, -1);
  const Tokenizer tok = small_tokenizer();
  VlmDataOptions o = options({shard}, "mixed");
  o.epochs = 5;
  o.shuffle_shards = true;
  o.shuffle_window = 8;
  auto a = VlmBatchLoader::open(o, tok);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->batches_per_epoch(7), 2u);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*a)->next_batch(7).ok());  // crosses an epoch boundary
  const std::string state = (*a)->state();
  // Another thread count and prefetching restore the same sequence.
  VlmDataOptions o2 = o;
  o2.decode_threads = 3;
  o2.prefetch_batches = 2;
  auto b = VlmBatchLoader::open(o2, tok);
  ASSERT_TRUE((*b)->restore(state).ok());
  for (int i = 0; i < 4; ++i) {
    auto x = (*a)->next_batch(7), y = (*b)->next_batch(7);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_EQ(x->tokens, y->tokens);
    EXPECT_EQ(x->loss_targets, y->loss_targets);
    EXPECT_TRUE(testing::all_close(x->images, y->images, 0, 0));
  }
  EXPECT_FALSE((*b)->restore("{not json").ok());
}

TEST(VlmBatch, DecodeThreadsAndPrefetchDoNotChangeBatches) {
  const std::string dir = testing::scratch_dir("batch_threads");
  const std::string shard = write_shard(dir, 24, 5, 11);
  const Tokenizer tok = small_tokenizer();
  VlmDataOptions o = options({shard}, "vqa");
  o.epochs = 2;
  o.shuffle_window = 5;
  std::vector<std::vector<int32_t>> reference;
  for (int threads : {0, 1, 4}) {
    for (int prefetch : {0, 3}) {
      o.decode_threads = threads;
      o.prefetch_batches = prefetch;
      auto l = VlmBatchLoader::open(o, tok);
      ASSERT_TRUE(l.ok());
      std::vector<std::vector<int32_t>> got;
      for (;;) {
        auto b = (*l)->next_batch(5);
        if (!b.ok()) break;
        got.push_back(b->tokens);
      }
      EXPECT_EQ(got.size(), 8u);  // 24 samples -> 4 batches of 5 per epoch, 2 epochs
      if (reference.empty()) reference = got;
      EXPECT_EQ(got, reference) << threads << " threads, prefetch " << prefetch;
      EXPECT_EQ((*l)->counters().bad_images, 2u);
      EXPECT_EQ((*l)->counters().bad_text, 2u);
    }
  }
}

}  // namespace
}  // namespace vlm
