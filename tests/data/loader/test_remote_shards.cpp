// Remote shards on the training path: a shard spec with braces over http:// (or pipe:) expands like a local one,
// and the training-batch loader (the trainer's data.shards path: expand_shard_spec -> VlmBatchLoader) fed from the
// loopback server, with connections dropped mid-shard and one shard missing, builds exactly the batches it builds
// from the same shards on disk. Also: "::" joining specs leaves IPv6 hosts alone.
#include <gtest/gtest.h>

#include <cstdlib>

#include "data/io/shard_spec.h"
#include "data/io/tar.h"
#include "data/loader/vlm_batch.h"
#include "data/tokenizer/bpe_trainer.h"
#include "data/tools/synth_shapes.h"
#include "data_test_util.h"
#include "http_test_server.h"
#include "testing/test_util.h"

namespace vlm {
namespace {

class RemoteShards : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"})
      ::unsetenv(v);
  }
  testing::HttpTestServer server_;
};

TEST_F(RemoteShards, SpecsExpandUrlsAndPipeCommands) {
  auto urls = expand_shard_spec(server_.url("/train/shard-{000..002}.tar"));
  ASSERT_TRUE(urls.ok()) << urls.status().to_string();
  EXPECT_EQ(*urls, (std::vector<std::string>{server_.url("/train/shard-000.tar"), server_.url("/train/shard-001.tar"),
                                             server_.url("/train/shard-002.tar")}));
  auto mixed = expand_shard_spec("https://h.example/{a,b}.tar::pipe:curl -s http://h.example/c-{0..1}.tar");
  ASSERT_TRUE(mixed.ok()) << mixed.status().to_string();
  EXPECT_EQ(*mixed, (std::vector<std::string>{"https://h.example/a.tar", "https://h.example/b.tar",
                                              "pipe:curl -s http://h.example/c-0.tar",
                                              "pipe:curl -s http://h.example/c-1.tar"}));
  auto v6 = expand_shard_spec("http://[::1]:8080/s-{0..1}.tar::http://[fe80::2]/t.tar");
  ASSERT_TRUE(v6.ok()) << v6.status().to_string();
  EXPECT_EQ(*v6, (std::vector<std::string>{"http://[::1]:8080/s-0.tar", "http://[::1]:8080/s-1.tar",
                                           "http://[fe80::2]/t.tar"}));
  // Malformed braces in a URL are named, not fetched.
  auto bad = expand_shard_spec(server_.url("/shard-{0..}.tar"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(bad.status().message().find("{0..}"), std::string::npos) << bad.status().message();
  EXPECT_TRUE(server_.requests().empty());
}

Tokenizer small_tokenizer() {
  std::vector<std::string> corpus = {"how many shapes are there? one two three", "a red circle and a blue square",
                                     "what color is the triangle? describe the image. a photo of a cat"};
  BpeTrainOptions o;
  o.vocab_size = 300;
  o.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<pad>"};
  return *train_bpe(corpus, o);
}

TEST_F(RemoteShards, BatchLoaderOverHttpEqualsLocalShards) {
  const std::string dir = testing::scratch_dir("remote_loader");
  // Shards 0..2 exist; both specs also name shard-3, missing on disk and answered 404 by the server: skipped and
  // counted the same way on both sides.
  for (int s = 0; s < 3; ++s) {
    const std::string name = str("/shard-", s, ".tar");
    auto w = TarWriter::create(dir + name);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 16; ++i) {
      SynthShapesSample x = synth_shapes_sample(7, static_cast<uint64_t>(s * 100 + i), 16);
      ASSERT_TRUE((*w)->add(x.key + ".jpg", *encode_jpeg(x.image, 90)).ok());
      ASSERT_TRUE((*w)->add(x.key + ".json", std::string_view(x.json())).ok());
    }
    ASSERT_TRUE((*w)->close().ok());
    server_.add_file(name, testing::read_bytes(dir + name));
  }
  const Tokenizer tok = small_tokenizer();
  auto options_for = [&](const std::string& spec) {
    VlmDataOptions o;
    auto shards = expand_shard_spec(spec);
    VLM_CHECK(shards.ok(), shards.status().to_string());
    o.shards = *shards;
    o.task = "vqa";
    o.image_size = 16;
    o.image_tokens = 4;
    o.max_turns = 3;
    o.epochs = 2;
    o.shuffle_window = 6;
    o.seed = 11;
    o.decode_threads = 2;
    o.prefetch_batches = 2;
    o.chat = *chat_template_by_name("plain");
    return o;
  };
  auto batches_of = [&](const VlmDataOptions& o, LoaderCounters* counters) {
    auto loader = VlmBatchLoader::open(o, tok);
    VLM_CHECK(loader.ok(), loader.status().to_string());
    std::vector<PackedBatch> out;
    for (;;) {
      auto b = (*loader)->next_batch(5);
      if (!b.ok()) break;
      out.push_back(std::move(*b));
    }
    *counters = (*loader)->counters();
    return out;
  };
  LoaderCounters local_counters, remote_counters;
  const auto expected = batches_of(options_for(dir + "/shard-{0..3}.tar"), &local_counters);
  ASSERT_GE(expected.size(), 18u);  // 48 samples x 2 epochs in batches of 5

  testing::HttpFaults f;
  f.drop_requests = 3;  // connections dropped mid-shard while counting and while streaming
  f.drop_after_bytes = 9000;
  server_.set_faults(f);
  const auto got = batches_of(options_for(server_.url("/shard-{0..3}.tar")), &remote_counters);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, expected[i].tokens) << "batch " << i;
    EXPECT_EQ(got[i].loss_targets, expected[i].loss_targets) << "batch " << i;
    EXPECT_TRUE(testing::all_close(got[i].images, expected[i].images, 0, 0)) << "batch " << i;
  }
  EXPECT_EQ(remote_counters.samples_ok, local_counters.samples_ok);
  EXPECT_EQ(remote_counters.samples_skipped, 0u);
  EXPECT_GE(remote_counters.shards_failed, 1u);  // shard-3: 404
  size_t ranged = 0, missing = 0;
  for (const auto& r : server_.requests()) {
    ranged += r.status == 206;
    missing += r.status == 404;
  }
  EXPECT_EQ(ranged, 3u) << "each dropped connection resumes with one Range request";
  EXPECT_GE(missing, 1u);
}

}  // namespace
}  // namespace vlm
