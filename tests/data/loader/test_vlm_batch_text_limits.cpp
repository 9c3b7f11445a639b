// Text that does not fit the model never ends a run: a caption longer than max_seq_len (a 2,500-character one and a
// multi-megabyte one) is cut to fit or skipped as data.overlong_caption says, an over-long question/answer turn is
// skipped, and .txt captions that are not UTF-8 are skipped or repaired as data.invalid_utf8 says; each outcome has
// a counter of its own and the batch keeps every other sample. Tar members with unsafe names are counted too.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>

#include "data/io/tar.h"
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

std::string words(size_t chars) {
  std::string s;
  const char* w[] = {"red ", "circle ", "blue ", "square ", "triangle ", "three "};
  for (size_t i = 0; s.size() < chars; ++i) s += w[i % 6];
  s.resize(chars);
  return s;
}

// Six shapes samples with a .txt caption each (`captions` replaces some) and their json.
std::string write_shard(const std::string& path, const std::map<int, std::string>& captions,
                        const std::map<int, std::string>& answers = {}) {
  auto w = TarWriter::create(path);
  EXPECT_TRUE(w.ok());
  for (int i = 0; i < 6; ++i) {
    SynthShapesSample s = synth_shapes_sample(5, static_cast<uint64_t>(i), 24);
    if (answers.count(i)) s.qa = {{"what is it?", answers.at(i)}};
    EXPECT_TRUE((*w)->add(s.key + ".jpg", *encode_jpeg(s.image, 90)).ok());
    EXPECT_TRUE((*w)->add(s.key + ".txt", captions.count(i) ? captions.at(i) : s.caption).ok());
    EXPECT_TRUE((*w)->add(s.key + ".json", s.json()).ok());
  }
  EXPECT_TRUE((*w)->close().ok());
  return path;
}

VlmDataOptions options(const std::string& shard, const std::string& task) {
  VlmDataOptions o;
  o.shards = {shard};
  o.task = task;
  o.image_size = 24;
  o.image_tokens = 4;
  o.max_turns = 1;
  o.max_seq_len = 96;
  o.epochs = 1;
  o.shuffle_shards = false;
  return o;
}

PackedBatch one_batch(const VlmDataOptions& o, const Tokenizer& tok, LoaderCounters* c) {
  auto l = VlmBatchLoader::open(o, tok);
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  auto b = (*l)->next_batch(6);
  EXPECT_TRUE(b.ok()) << b.status().to_string();  // before: "one turn needs N tokens, more than max_seq_len"
  *c = (*l)->counters();
  return b.ok() ? std::move(*b) : PackedBatch();
}

TEST(VlmBatchTextLimits, LongCaptionsAreCutToFitByDefault) {
  const std::string dir = testing::scratch_dir("text_limits_cut");
  const Tokenizer tok = tokenizer();
  const std::string huge = words(3u << 20);  // 3 MiB: millions of tokens
  const std::string shard = write_shard(dir + "/s.tar", {{1, words(2500)}, {4, huge}});
  const VlmDataOptions o = options(shard, "caption");
  ASSERT_TRUE(o.truncate_long_captions);  // the default
  const auto t0 = std::chrono::steady_clock::now();
  LoaderCounters c;
  const PackedBatch b = one_batch(o, tok, &c);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(b.n_samples, 6);
  EXPECT_EQ(c.truncated_captions, 2u);
  EXPECT_EQ(c.too_long, 0u);
  EXPECT_EQ(c.samples_skipped, 0u);
  EXPECT_LT(seconds, 20.0) << "a huge caption must not take long (only a prefix is tokenized)";
  const int32_t end_id = *tok.token_to_id("<|im_end|>");
  ASSERT_EQ(b.cu_seqlens.size(), 7u);
  for (size_t i = 0; i + 1 < b.cu_seqlens.size(); ++i) {
    const int len = b.cu_seqlens[i + 1] - b.cu_seqlens[i];
    EXPECT_LE(len, o.max_seq_len) << "sample " << i;
    EXPECT_EQ(b.tokens[static_cast<size_t>(b.cu_seqlens[i + 1] - 1)], end_id) << "sample " << i << " keeps its end";
    if (i == 1 || i == 4) {
      EXPECT_EQ(len, o.max_seq_len) << "a cut caption fills the sequence";
      // The cut caption's tokens are a prefix of the caption's text.
      std::vector<int32_t> ids(b.tokens.begin() + b.cu_seqlens[i], b.tokens.begin() + b.cu_seqlens[i + 1] - 1);
      const std::string text = tok.decode(ids);
      const std::string cap_start = words(40);
      EXPECT_NE(text.find(cap_start), std::string::npos) << text;
    }
  }
  // The targets include the cut caption's tokens and its end marker.
  EXPECT_GT(b.loss_rows.size(), static_cast<size_t>(2 * (o.max_seq_len - 40)));
}

TEST(VlmBatchTextLimits, LongCaptionsAreSkippedWhenAskedAndCounted) {
  const std::string dir = testing::scratch_dir("text_limits_skip");
  const Tokenizer tok = tokenizer();
  const std::string shard = write_shard(dir + "/s.tar", {{1, words(2500)}, {4, words(1u << 20)}});
  VlmDataOptions o = options(shard, "caption");
  o.truncate_long_captions = false;
  LoaderCounters c;
  const PackedBatch b = one_batch(o, tok, &c);
  EXPECT_EQ(b.n_samples, 4);
  EXPECT_EQ(c.too_long, 2u);
  EXPECT_EQ(c.samples_skipped, 2u);
  EXPECT_EQ(c.truncated_captions, 0u);
  EXPECT_EQ(c.bad_text, 0u);
}

TEST(VlmBatchTextLimits, AnOverLongAnswerIsSkippedNotCut) {
  const std::string dir = testing::scratch_dir("text_limits_vqa");
  const Tokenizer tok = tokenizer();
  const std::string shard = write_shard(dir + "/s.tar", {}, {{2, words(2500)}});
  LoaderCounters c;
  const PackedBatch b = one_batch(options(shard, "vqa"), tok, &c);
  EXPECT_EQ(b.n_samples, 5);
  EXPECT_EQ(c.too_long, 1u);
  EXPECT_EQ(c.truncated_captions, 0u);
}

TEST(VlmBatchTextLimits, InvalidUtf8CaptionsAreSkippedOrRepairedAndCounted) {
  const std::string dir = testing::scratch_dir("text_limits_utf8");
  const Tokenizer tok = tokenizer();
  const std::string shard =
      write_shard(dir + "/s.tar", {{0, "a red \xff\xfe circle"}, {3, "caf\xe9 square"}, {5, "\xc3\x28 blue"}});
  VlmDataOptions o = options(shard, "caption");
  ASSERT_EQ(o.invalid_utf8, InvalidUtf8::reject);  // the default: skip
  LoaderCounters c;
  PackedBatch b = one_batch(o, tok, &c);
  EXPECT_EQ(b.n_samples, 3);
  EXPECT_EQ(c.bad_utf8, 3u);
  EXPECT_EQ(c.samples_skipped, 3u);
  EXPECT_EQ(c.repaired_utf8, 0u);

  o.invalid_utf8 = InvalidUtf8::repair;
  b = one_batch(o, tok, &c);
  EXPECT_EQ(b.n_samples, 6);
  EXPECT_EQ(c.bad_utf8, 0u);
  EXPECT_EQ(c.repaired_utf8, 3u);
  const std::string first = tok.decode(std::vector<int32_t>(b.tokens.begin(), b.tokens.begin() + b.cu_seqlens[1]));
  EXPECT_NE(first.find("a red \xef\xbf\xbd\xef\xbf\xbd circle"), std::string::npos) << first;

  // The mixed task reads the same caption.
  o.task = "mixed";
  o.invalid_utf8 = InvalidUtf8::reject;
  b = one_batch(o, tok, &c);
  EXPECT_EQ(c.bad_utf8, 3u);
}

TEST(VlmBatchTextLimits, Utf8Helpers) {
  EXPECT_EQ(first_invalid_utf8("plain"), std::string::npos);
  EXPECT_EQ(first_invalid_utf8("caf\xc3\xa9"), std::string::npos);
  EXPECT_EQ(first_invalid_utf8("caf\xe9!"), 3u);
  EXPECT_EQ(first_invalid_utf8("\xed\xa0\x80"), 0u);  // a surrogate
  EXPECT_EQ(repair_utf8("caf\xe9!"), "caf\xef\xbf\xbd!");
  EXPECT_EQ(repair_utf8("ok \xf0\x9f\x98\x80"), "ok \xf0\x9f\x98\x80");
}

TEST(VlmBatchTextLimits, UnsafeTarMemberNamesAreCountedByTheTrainingLoader) {
  const std::string dir = testing::scratch_dir("text_limits_unsafe");
  const Tokenizer tok = tokenizer();
  std::vector<uint8_t> tar;
  for (int i = 0; i < 6; ++i) {  // six good samples, unsafe members after the first
    SynthShapesSample s = synth_shapes_sample(5, static_cast<uint64_t>(i), 24);
    const std::vector<uint8_t> jpg = *encode_jpeg(s.image, 90);
    testing::append(tar, testing::tar_member(s.key + ".jpg", std::string(jpg.begin(), jpg.end())));
    testing::append(tar, testing::tar_member(s.key + ".txt", s.caption));
    if (i == 0) {
      testing::append(tar, testing::tar_member("../escape.txt", "a caption"));
      testing::append(tar, testing::tar_member("/etc/escape.jpg", "not an image"));
    }
  }
  testing::append(tar, testing::tar_end());
  const std::string shard = dir + "/s.tar";
  {
    std::ofstream f(shard, std::ios::binary);
    f.write(reinterpret_cast<const char*>(tar.data()), static_cast<std::streamsize>(tar.size()));
  }
  LoaderCounters c;
  const PackedBatch b = one_batch(options(shard, "caption"), tok, &c);
  EXPECT_EQ(b.n_samples, 6);  // every safe sample trains
  EXPECT_EQ(c.unsafe_members, 2u) << "before: skipped with a warning, counted nowhere";
}

}  // namespace
}  // namespace vlm
