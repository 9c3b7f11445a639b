// Bad data as `vlm` meets it, end to end through the binary: a 2,500-character and a multi-megabyte caption do not
// end `vlm train`; a run whose every image is undecodable exits non-zero naming the reason and leaves no checkpoint;
// `vlm data tokenizer-train` counts (and skips or repairs) captions that are not UTF-8; `vlm data inspect` and
// `vlm data filter` count tar members skipped for unsafe names; `vlm eval`, `generate` and `convert` pass over a
// damaged newest checkpoint.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "data/io/tar.h"
#include "data/tools/synth_shapes.h"
#include "data_test_util.h"
#include "testing/test_util.h"

namespace vlm {
namespace {
namespace fs = std::filesystem;

using CliResult = vlm::testing::CommandResult;

CliResult run(const std::string& args) { return vlm::testing::run_command(VLM_BINARY, args); }

// `n` shapes samples (16 px) with .jpg, .txt and .json; `caption(i)` replaces a caption when non-empty, `corrupt`
// makes every image undecodable.
template <class CaptionFn>
void write_shard(const std::string& path, int n, CaptionFn caption, bool corrupt = false) {
  fs::create_directories(fs::path(path).parent_path());
  auto w = TarWriter::create(path);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < n; ++i) {
    SynthShapesSample s = synth_shapes_sample(1, static_cast<uint64_t>(i), 16);
    const std::string c = caption(i);
    ASSERT_TRUE((*w)->add(s.key + ".jpg", corrupt ? std::vector<uint8_t>(100, 7) : *encode_jpeg(s.image, 90)).ok());
    ASSERT_TRUE((*w)->add(s.key + ".txt", c.empty() ? s.caption : c).ok());
    ASSERT_TRUE((*w)->add(s.key + ".json", s.json()).ok());
  }
  ASSERT_TRUE((*w)->close().ok());
}

std::string tiny_model_flags(const std::string& dir) {
  return "--set model.vision.image_size=16 --set model.vision.patch_size=4 --set model.vision.hidden=16 "
         "--set model.vision.layers=1 --set model.vision.mlp_hidden=32 --set model.text.vocab_size=300 "
         "--set model.text.hidden=32 --set model.text.layers=1 --set model.text.intermediate=48 "
         "--set model.text.max_seq_len=128 --set data.tokenizer=" + dir + "/tokenizer.json --set data.task=caption "
         "--set train.batch_size=4 --set train.steps=4 --set train.ckpt_every=2 --set train.threads=1 --quiet";
}

std::string words(size_t chars) {
  std::string s;
  for (size_t i = 0; s.size() < chars; ++i) s += i % 2 ? "red circle " : "blue square ";
  s.resize(chars);
  return s;
}

TEST(CliReliability, LongCaptionsDoNotEndARunAndUndecodableImagesFailIt) {
  const std::string dir = testing::scratch_dir("cli_long_captions");
  write_shard(dir + "/train/shard-0.tar", 24, [](int i) {
    return i == 3 ? words(2500) : i == 9 ? words(2u << 20) : std::string();
  });
  CliResult tok = run("data tokenizer-train --shards " + dir + "/train --out " + dir + "/tokenizer.json --vocab-size 300");
  ASSERT_EQ(tok.code, 0) << tok.out;
  for (const char* mode : {"truncate", "skip"}) {
    // Before: "one turn needs N tokens, more than max_seq_len 128", exit 1.
    const CliResult r = run("train " + tiny_model_flags(dir) + " --set data.train_shards=" + dir + "/train " +
                            "--set data.overlong_caption=" + mode + " --run-dir " + dir + "/run_" + mode);
    EXPECT_EQ(r.code, 0) << mode << ": " << r.out;
    if (std::string(mode) == "skip") {
      EXPECT_NE(r.out.find("shard-0.tar: 000000003: the caption turn needs"), std::string::npos) << r.out;
    }
  }
  write_shard(dir + "/corrupt/shard-0.tar", 24, [](int) { return std::string(); }, true);
  const CliResult bad = run("train " + tiny_model_flags(dir) + " --set data.train_shards=" + dir + "/corrupt " +
                            "--set data.skip_window=100 --run-dir " + dir + "/run_corrupt");
  EXPECT_EQ(bad.code, 1) << "before: exit 0, final loss 0.0000\n" << bad.out;
  EXPECT_NE(bad.out.find("main reason: bad_images"), std::string::npos) << bad.out;
  EXPECT_FALSE(fs::exists(dir + "/run_corrupt/checkpoints/step_00000002"));
  EXPECT_FALSE(fs::exists(dir + "/run_corrupt/checkpoints/step_00000004"));
}

TEST(CliReliability, EvalGenerateAndConvertPassOverADamagedNewestCheckpoint) {
  const std::string dir = testing::scratch_dir("cli_eval_damaged");
  write_shard(dir + "/train/shard-0.tar", 16, [](int) { return std::string(); });
  ASSERT_EQ(run("data tokenizer-train --shards " + dir + "/train --out " + dir + "/tokenizer.json --vocab-size 300").code,
            0);
  const std::string data = " --set data.train_shards=" + dir + "/train --set data.val_shards=" + dir + "/train";
  const CliResult train = run("train " + tiny_model_flags(dir) + data + " --set train.keep_last=2 --run-dir " + dir +
                              "/run");
  ASSERT_EQ(train.code, 0) << train.out;
  const std::string newest = dir + "/run/checkpoints/step_00000004/model.safetensors";
  ASSERT_TRUE(fs::exists(newest));
  fs::resize_file(newest, fs::file_size(newest) / 2);
  // Before: eval loaded step 4 and failed on its truncated weights.
  const CliResult r = run("eval --run-dir " + dir + "/run --task caption --samples 4");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("step_00000004 is damaged"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(newest)) << "eval must not move or delete a checkpoint";
  // generate and convert read a run the same way.
  const CliResult g = run("generate " + dir + "/run --prompt 'a red circle' --max-tokens 2 --quiet");
  EXPECT_EQ(g.code, 0) << g.out;
  EXPECT_NE(g.out.find("generate: checkpoint"), std::string::npos) << g.out;
  const CliResult c = run("convert " + dir + "/run --to hf --out " + dir + "/hf");
  EXPECT_EQ(c.code, 0) << c.out;
  EXPECT_NE(c.out.find("convert: checkpoint"), std::string::npos) << c.out;
  EXPECT_TRUE(fs::exists(newest));
}

TEST(CliReliability, TokenizerTrainCountsInvalidUtf8) {
  const std::string dir = testing::scratch_dir("cli_tok_utf8");
  write_shard(dir + "/s.tar", 8, [](int i) { return i == 2 ? std::string("caf\xe9 au lait") : std::string(); });
  const CliResult skip = run("data tokenizer-train --shards " + dir + "/s.tar --out " + dir + "/a.json --vocab-size 300");
  ASSERT_EQ(skip.code, 0) << skip.out;
  EXPECT_NE(skip.out.find("captions not valid UTF-8: 1 skipped"), std::string::npos) << skip.out;
  EXPECT_NE(skip.out.find("000000002.txt: not valid UTF-8 (byte 3)"), std::string::npos) << skip.out;
  const CliResult repair = run("data tokenizer-train --shards " + dir + "/s.tar --out " + dir +
                               "/b.json --vocab-size 300 --invalid-utf8 repair");
  ASSERT_EQ(repair.code, 0) << repair.out;
  EXPECT_NE(repair.out.find("captions not valid UTF-8: 1 repaired"), std::string::npos) << repair.out;
  EXPECT_EQ(run("data tokenizer-train --shards " + dir + "/s.tar --out " + dir + "/c.json --invalid-utf8 keep").code, 2);
}

TEST(CliReliability, InspectAndFilterCountUnsafeMemberNames) {
  const std::string dir = testing::scratch_dir("cli_unsafe_names");
  std::vector<uint8_t> tar;
  testing::append(tar, testing::tar_member("../evil.txt", "evil"));
  testing::append(tar, testing::tar_member("/etc/abs.txt", "abs"));
  testing::append(tar, testing::tar_member("000000000.txt", "a red circle"));
  testing::append(tar, testing::tar_member("000000000.json", "{\"caption\": \"a red circle\"}"));
  testing::append(tar, testing::tar_member("a/../../b.txt", "sneaky"));
  testing::append(tar, testing::tar_end());
  testing::write_bytes(dir + "/s.tar", tar);
  const CliResult inspect = run("data inspect --shards " + dir + "/s.tar --json " + dir + "/inspect.json");
  ASSERT_EQ(inspect.code, 0) << inspect.out;
  EXPECT_NE(inspect.out.find("3 unsafe member names skipped"), std::string::npos) << inspect.out;  // before: uncounted
  const std::vector<uint8_t> j = testing::read_bytes(dir + "/inspect.json");
  EXPECT_NE(std::string(j.begin(), j.end()).find("\"unsafe_members\": 3"), std::string::npos);
  const CliResult filter = run("data filter --shards " + dir + "/s.tar --out " + dir + "/out");
  ASSERT_EQ(filter.code, 0) << filter.out;
  EXPECT_NE(filter.out.find("3 unsafe member names skipped"), std::string::npos) << filter.out;
}

}  // namespace
}  // namespace vlm
