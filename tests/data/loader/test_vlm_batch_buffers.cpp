// The loader's batch building: samples decoded straight into their planes of a reused batch buffer and tokenized on
// the decode threads equal the slow twin (prepare_sample + pack_samples over the same samples in read order), with
// bad samples leaving gaps that are packed out; batches a caller still holds are never overwritten by later ones;
// in steady state the image buffers are reused; turn truncation is handled as pack_samples does, over-long turns
// are skipped; the loader's timing counters add up.
#include <gtest/gtest.h>

#include <set>

#include "data/io/tar.h"
#include "data/io/webdataset.h"
#include "data/loader/vlm_batch.h"
#include "data/tokenizer/bpe_trainer.h"
#include "data/tools/synth_shapes.h"
#include "data_test_util.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

Tokenizer tokenizer() {
  std::vector<std::string> corpus = {"how many shapes are there? one two three", "a red circle and a blue square",
                                     "what color is the triangle? describe the image. a photo of a cat"};
  BpeTrainOptions o;
  o.vocab_size = 300;
  o.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<pad>"};
  return *train_bpe(corpus, o);
}

VlmDataOptions options(const std::string& shard) {
  VlmDataOptions o;
  o.shards = {shard};
  o.task = "vqa";
  o.image_size = 24;
  o.image_tokens = 4;
  o.max_turns = 4;
  o.epochs = 1;
  o.shuffle_shards = false;
  o.chat = *chat_template_by_name("plain");
  return o;
}

// n synthetic VQA samples; those in `bad_jpeg` have a cut-off image, those in `bad_json` broken JSON.
std::string write_shard(const std::string& path, int n, const std::set<int>& bad_jpeg, const std::set<int>& bad_json) {
  auto w = TarWriter::create(path);
  EXPECT_TRUE(w.ok());
  for (int i = 0; i < n; ++i) {
    SynthShapesSample s = synth_shapes_sample(3, static_cast<uint64_t>(i), 40);
    std::vector<uint8_t> jpg = *encode_jpeg(s.image, 90);
    if (bad_jpeg.count(i)) jpg.resize(jpg.size() / 3);
    EXPECT_TRUE((*w)->add(s.key + ".jpg", jpg).ok());
    EXPECT_TRUE((*w)->add(s.key + ".json", bad_json.count(i) ? std::string("{\"qa\": [") : s.json()).ok());
  }
  EXPECT_TRUE((*w)->close().ok());
  return path;
}

// The slow twin: every sample of the shard in read order through prepare_sample, the good ones packed `batch` at a
// time by pack_samples.
std::vector<PackedBatch> reference_batches(const VlmDataOptions& o, const Tokenizer& tok, int batch) {
  auto reader = WebDatasetReader::open(o.shards[0]);
  EXPECT_TRUE(reader.ok());
  std::vector<PackedBatch> out;
  std::vector<PreparedSample> good;
  WebDatasetSample s;
  for (uint64_t i = 0;; ++i) {
    auto more = (*reader)->next(s);
    EXPECT_TRUE(more.ok());
    if (!more.ok() || !*more) break;
    auto p = prepare_sample(s, o, i);
    if (p.ok()) good.push_back(std::move(*p));
    if ((i + 1) % static_cast<uint64_t>(batch) == 0) {
      LoaderCounters c;
      out.push_back(*pack_samples(good, tok, o, &c));
      good.clear();
    }
  }
  return out;
}

void expect_same_batch(const PackedBatch& a, const PackedBatch& b, const std::string& what) {
  EXPECT_EQ(a.n_samples, b.n_samples) << what;
  EXPECT_EQ(a.tokens, b.tokens) << what;
  EXPECT_EQ(a.positions, b.positions) << what;
  EXPECT_EQ(a.cu_seqlens, b.cu_seqlens) << what;
  EXPECT_EQ(a.image_rows, b.image_rows) << what;
  EXPECT_EQ(a.loss_rows, b.loss_rows) << what;
  EXPECT_EQ(a.loss_targets, b.loss_targets) << what;
  EXPECT_EQ(a.max_seqlen, b.max_seqlen) << what;
  ASSERT_EQ(a.images.shape(), b.images.shape()) << what;
  EXPECT_TRUE(testing::all_close(a.images, b.images, 0, 0)) << what;
}

TEST(VlmBatchBuffers, BatchesEqualPrepareAndPackOverTheSameSamples) {
  const std::string dir = testing::scratch_dir("batch_buffers_twin");
  // Gaps at a batch's start, middle and end, and a batch with no good sample at all (slots 15..19).
  const std::string shard = write_shard(dir + "/s.tar", 25, {0, 7, 15, 16, 17}, {9, 18, 19, 4});
  const Tokenizer tok = tokenizer();
  const VlmDataOptions base = options(shard);
  const std::vector<PackedBatch> ref = reference_batches(base, tok, 5);
  ASSERT_EQ(ref.size(), 5u);
  EXPECT_EQ(ref[3].n_samples, 0);
  for (int threads : {0, 1, 3})
    for (int prefetch : {0, 2}) {
      VlmDataOptions o = base;
      o.decode_threads = threads;
      o.prefetch_batches = prefetch;
      auto l = VlmBatchLoader::open(o, tok);
      ASSERT_TRUE(l.ok()) << l.status().to_string();
      for (size_t b = 0; b < ref.size(); ++b) {
        auto got = (*l)->next_batch(5);
        ASSERT_TRUE(got.ok()) << got.status().to_string();
        expect_same_batch(*got, ref[b], str("batch ", b, ", ", threads, " threads, prefetch ", prefetch));
      }
      EXPECT_EQ((*l)->counters().bad_images, 5u);
      EXPECT_EQ((*l)->counters().bad_text, 4u);
    }
}

TEST(VlmBatchBuffers, HeldBatchesAreNeverOverwrittenAndFreeBuffersAreReused) {
  const std::string dir = testing::scratch_dir("batch_buffers_reuse");
  const std::string shard = write_shard(dir + "/s.tar", 30, {4}, {});
  const Tokenizer tok = tokenizer();
  VlmDataOptions o = options(shard);
  o.epochs = 4;
  o.shuffle_window = 7;
  o.decode_threads = 2;
  o.prefetch_batches = 2;
  // Drop every batch at once: a few buffers serve all 24 batches (the one handed out, those built ahead, the one
  // being built).
  std::vector<float> first_images;
  std::set<const void*> buffers_seen;
  {
    auto l = VlmBatchLoader::open(o, tok);
    ASSERT_TRUE(l.ok());
    for (int b = 0; b < 24; ++b) {
      auto got = (*l)->next_batch(5);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      buffers_seen.insert(got->images.raw_data());
      if (b == 0) first_images.assign(got->images.data<float>(), got->images.data<float>() + got->images.numel());
    }
  }
  EXPECT_LE(buffers_seen.size(), 5u) << "steady-state batches must reuse their image buffers";
  // Hold all 24: every one stays as built (compared with a run that keeps nothing, batch by batch).
  auto held_loader = VlmBatchLoader::open(o, tok);
  auto fresh_loader = VlmBatchLoader::open(o, tok);
  ASSERT_TRUE(held_loader.ok() && fresh_loader.ok());
  std::vector<PackedBatch> held;
  std::vector<std::vector<float>> fresh;
  for (int b = 0; b < 24; ++b) {
    held.push_back(*(*held_loader)->next_batch(5));
    auto f = (*fresh_loader)->next_batch(5);
    fresh.emplace_back(f->images.data<float>(), f->images.data<float>() + f->images.numel());
  }
  std::set<const void*> distinct;
  for (int b = 0; b < 24; ++b) {
    distinct.insert(held[static_cast<size_t>(b)].images.raw_data());
    const Tensor& t = held[static_cast<size_t>(b)].images;
    EXPECT_EQ(std::vector<float>(t.data<float>(), t.data<float>() + t.numel()), fresh[static_cast<size_t>(b)])
        << "batch " << b << " changed after later batches were built";
  }
  EXPECT_EQ(distinct.size(), 24u);
  const Tensor& t0 = held[0].images;
  EXPECT_EQ(std::vector<float>(t0.data<float>(), t0.data<float>() + t0.numel()), first_images);
}

TEST(VlmBatchBuffers, TruncatedTurnsAndOverLongTurnsAsPackSamples) {
  const std::string dir = testing::scratch_dir("batch_buffers_trunc");
  const std::string shard = write_shard(dir + "/s.tar", 10, {}, {});
  const Tokenizer tok = tokenizer();
  VlmDataOptions o = options(shard);
  o.max_seq_len = 40;  // room for one or two turns: the rest are dropped and counted
  o.decode_threads = 2;
  const std::vector<PackedBatch> ref = reference_batches(o, tok, 5);
  uint64_t ref_truncated = 0;
  {
    auto reader = WebDatasetReader::open(shard);
    WebDatasetSample s;
    std::vector<PreparedSample> all;
    for (uint64_t i = 0; *(*reader)->next(s); ++i) all.push_back(*prepare_sample(s, o, i));
    LoaderCounters c;
    ASSERT_TRUE(pack_samples(all, tok, o, &c).ok());
    ref_truncated = c.truncated_sequences;
  }
  ASSERT_GT(ref_truncated, 0u);
  auto l = VlmBatchLoader::open(o, tok);
  ASSERT_TRUE(l.ok());
  for (size_t b = 0; b < ref.size(); ++b) expect_same_batch(*(*l)->next_batch(5), ref[b], str("batch ", b));
  EXPECT_EQ((*l)->counters().truncated_sequences, ref_truncated);
  // A single turn longer than max_seq_len is a skipped sample with a reason of its own, not the end of the run
  // (the trainer's data.max_skip_fraction stops a run where that is every sample).
  o.max_seq_len = 8;
  auto tight = VlmBatchLoader::open(o, tok);
  ASSERT_TRUE(tight.ok());
  auto skipped = (*tight)->next_batch(5);
  ASSERT_TRUE(skipped.ok()) << skipped.status().to_string();
  EXPECT_EQ(skipped->n_samples, 0);
  EXPECT_EQ((*tight)->counters().too_long, 5u);
  EXPECT_EQ((*tight)->counters().samples_skipped, 5u);
}

TEST(VlmBatchBuffers, TimingCountersAddUp) {
  const std::string dir = testing::scratch_dir("batch_buffers_timing");
  const std::string shard = write_shard(dir + "/s.tar", 20, {}, {});
  const Tokenizer tok = tokenizer();
  VlmDataOptions o = options(shard);
  o.epochs = 0;
  for (int prefetch : {0, 2}) {
    o.prefetch_batches = prefetch;
    auto l = VlmBatchLoader::open(o, tok);
    ASSERT_TRUE(l.ok());
    for (int b = 0; b < 6; ++b) ASSERT_TRUE((*l)->next_batch(5).ok());
    const LoaderTiming t = (*l)->timing();
    EXPECT_EQ(t.batches, 6u);
    EXPECT_GT(t.decode_s, 0.0);
    EXPECT_GE(t.read_s, 0.0);
    EXPECT_GE(t.pack_s, 0.0);
    EXPECT_GE(t.ahead_s, 0.0);
    // Without prefetching the consumer waits for the whole build.
    if (prefetch == 0) {
      EXPECT_GE(t.wait_s, t.read_s + t.decode_s + t.pack_s);
      EXPECT_EQ(t.ahead_s, 0.0);
    }
  }
}

}  // namespace
}  // namespace vlm
