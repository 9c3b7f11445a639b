// Online exact dedup in the training loader (VlmDataOptions::dedup_exact): repeated image bytes within an epoch are
// dropped and counted, every epoch starts afresh, the result is independent of decode threads and prefetching, and a
// loader restored from state() mid-epoch (with the epoch's seen hashes) drops exactly what the uninterrupted one does.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/io/tar.h"
#include "data/loader/vlm_batch.h"
#include "data/tokenizer/bpe_trainer.h"
#include "data/tools/synth_shapes.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

Tokenizer dedup_tokenizer() {
  BpeTrainOptions o;
  o.vocab_size = 300;
  o.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<pad>"};
  return *train_bpe({"how many shapes are there? one two three", "a red circle and a blue square"}, o);
}

// n samples; sample i uses the image bytes of sample source[i] (source[i] == i: its own image).
std::string write_shard_with_copies(const std::string& dir, const std::vector<int>& source) {
  const std::string path = dir + "/d.tar";
  auto w = TarWriter::create(path);
  EXPECT_TRUE(w.ok());
  for (size_t i = 0; i < source.size(); ++i) {
    SynthShapesSample own = synth_shapes_sample(7, i, 16);
    SynthShapesSample img = synth_shapes_sample(7, static_cast<uint64_t>(source[i]), 16);
    EXPECT_TRUE((*w)->add(own.key + ".jpg", *encode_jpeg(img.image, 90)).ok());
    EXPECT_TRUE((*w)->add(own.key + ".json", own.json()).ok());
  }
  EXPECT_TRUE((*w)->close().ok());
  return path;
}

VlmDataOptions dedup_options(const std::string& shard) {
  VlmDataOptions o;
  o.shards = {shard};
  o.task = "vqa";
  o.image_size = 16;
  o.image_tokens = 4;
  o.max_turns = 2;
  o.epochs = 3;
  o.shuffle_window = 6;
  o.seed = 11;
  o.dedup_exact = true;
  o.chat = *chat_template_by_name("plain");
  return o;
}

// 24 samples, 5 of them repeat an earlier image (image 12 appears three times): 19 distinct images per epoch.
const std::vector<int> kSources = {0, 1, 2, 1, 4, 5, 6, 7, 2, 9, 10, 11, 12, 12, 14, 15, 16, 17, 18, 12, 20, 21, 5, 23};

TEST(VlmBatchDedup, DropsRepeatsWithinEachEpochAndCountsThem) {
  const std::string shard = write_shard_with_copies(testing::scratch_dir("dedup_online"), kSources);
  const Tokenizer tok = dedup_tokenizer();
  auto l = VlmBatchLoader::open(dedup_options(shard), tok);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  int samples = 0;
  for (int b = 0; b < 3 * 4; ++b) {  // 3 epochs of 4 batches of 6
    auto batch = (*l)->next_batch(6);
    ASSERT_TRUE(batch.ok()) << batch.status().to_string();
    samples += batch->n_samples;
  }
  EXPECT_FALSE((*l)->next_batch(6).ok());
  const LoaderCounters c = (*l)->counters();
  EXPECT_EQ(c.samples_duplicate, 3u * 5u);  // 5 repeats in every epoch: each epoch starts with an empty set
  EXPECT_EQ(samples, 3 * 19);
  EXPECT_EQ(c.samples_ok, 3u * 19u);
  // Without dedup every sample is used.
  VlmDataOptions off = dedup_options(shard);
  off.dedup_exact = false;
  auto all = VlmBatchLoader::open(off, tok);
  int n = 0;
  for (int b = 0; b < 4; ++b) n += (*all)->next_batch(6)->n_samples;
  EXPECT_EQ(n, 24);
}

TEST(VlmBatchDedup, ResumeMidEpochDropsExactlyWhatTheUninterruptedRunDrops) {
  const std::string shard = write_shard_with_copies(testing::scratch_dir("dedup_resume"), kSources);
  const Tokenizer tok = dedup_tokenizer();
  const VlmDataOptions o = dedup_options(shard);
  auto a = VlmBatchLoader::open(o, tok);
  ASSERT_TRUE(a.ok());
  for (int b = 0; b < 6; ++b) ASSERT_TRUE((*a)->next_batch(6).ok());  // mid-way through epoch 2
  const std::string state = (*a)->state();
  ASSERT_TRUE(nlohmann::json::parse(state).contains("dedup"));
  VlmDataOptions o2 = o;  // other threads and prefetching: same batches
  o2.decode_threads = 2;
  o2.prefetch_batches = 2;
  auto b = VlmBatchLoader::open(o2, tok);
  ASSERT_TRUE((*b)->restore(state).ok());
  for (int i = 0; i < 6; ++i) {
    auto x = (*a)->next_batch(6), y = (*b)->next_batch(6);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_EQ(x->n_samples, y->n_samples) << "batch " << i;
    EXPECT_EQ(x->tokens, y->tokens);
    EXPECT_TRUE(testing::all_close(x->images, y->images, 0, 0));
  }
  EXPECT_EQ((*a)->counters().samples_duplicate, (*b)->counters().samples_duplicate);
  // A loader restored WITHOUT the seen hashes would keep repeats of images it had not seen: the state matters.
  auto j = nlohmann::json::parse(state);
  j.erase("dedup");
  auto c = VlmBatchLoader::open(o, tok);
  ASSERT_TRUE((*c)->restore(j.dump()).ok());
  auto d = VlmBatchLoader::open(o, tok);
  ASSERT_TRUE((*d)->restore(state).ok());
  int kept_without = 0, kept_with = 0;
  for (int i = 0; i < 2; ++i) {  // the rest of epoch 2
    kept_without += (*c)->next_batch(6)->n_samples;
    kept_with += (*d)->next_batch(6)->n_samples;
  }
  EXPECT_GT(kept_without, kept_with);
  // Corrupt dedup state is an error naming the problem.
  j["dedup"] = {{"epoch", 1}, {"hashes", "xyz"}};
  auto e = VlmBatchLoader::open(o, tok);
  const Status bad = (*e)->restore(j.dump());
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("dedup"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace vlm
