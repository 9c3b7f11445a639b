// The `vlm` binary as a user meets it: generated help, exit codes, errors that name the file, key and reason, and
// a tiny end-to-end run (synth -> tokenizer-train -> train -> eval -> resume).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "testing/test_util.h"

namespace {

struct CliResult {
  int code;
  std::string out;  // stdout and stderr together
};

CliResult run(const std::string& args) {
  const std::string cmd = std::string(VLM_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(Cli, HelpIsGeneratedFromTheOptionDeclarations) {
  CliResult r = run("train --help");
  EXPECT_EQ(r.code, 0);
  for (const char* s : {"--config", "--resume", "train.lr", "model.text.kv_heads", "data.train_shards", "eval.samples"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  EXPECT_EQ(run("").code, 2);
  EXPECT_EQ(run("frobnicate").code, 2);
  EXPECT_EQ(run("data synth --help").code, 0);
}

// `vlm bench train` parses its options before it looks for a GPU, so a bad value fails with exit code 2 anywhere.
TEST(Cli, BenchTrainOptions) {
  CliResult r = run("bench train --help");
  EXPECT_EQ(r.code, 0);
  for (const char* s : {"--grad-clip", "--trace-steps", "--profile-steps", "--peer"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  for (const char* bad : {"--grad-clip -1", "--grad-clip abc", "--grad-clip nan", "--grad-clip inf",
                          "--trace-steps -1", "--batch 0"}) {
    r = run(std::string("bench train ") + bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("bad or missing value"), std::string::npos) << bad << ": " << r.out;
  }
}

TEST(Cli, BadConfigNamesFileKeyAndReason) {
  const std::string dir = vlm::testing::scratch_dir("cli_bad");
  std::ofstream(dir + "/bad.toml") << "[train]\nbatch_size = 0\n";
  CliResult r = run("train --config " + dir + "/bad.toml --run-dir " + dir + "/run");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find(dir + "/bad.toml: train.batch_size: must be > 0"), std::string::npos) << r.out;
  r = run("train --config " + dir + "/bad.toml --set train.batch_size=4 --set train.warmup=3");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("unknown key 'train.warmup'"), std::string::npos) << r.out;
  r = run("train --bogus");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--bogus"), std::string::npos);
}

TEST(Cli, TinyEndToEndRunWithResumeAndEval) {
  const std::string dir = vlm::testing::scratch_dir("cli_e2e");
  ASSERT_EQ(run("data synth shapes --out " + dir + "/train --samples 60 --seed 1 --image-size 16 --shard-size 25").code, 0);
  ASSERT_EQ(run("data synth shapes --out " + dir + "/val --samples 8 --seed 2 --image-size 16").code, 0);
  CliResult t = run("data tokenizer-train --shards " + dir + "/train --out " + dir + "/tok.json --vocab-size 300");
  ASSERT_EQ(t.code, 0) << t.out;
  std::ofstream(dir + "/run.toml") << "[model.vision]\nimage_size = 16\npatch_size = 4\nhidden = 16\nlayers = 1\n"
                                      "heads = 2\nmlp_hidden = 32\n[model.text]\nvocab_size = 300\nhidden = 32\n"
                                      "layers = 1\nintermediate = 48\n[data]\ntrain_shards = \"" + dir + "/train\"\n"
                                      "val_shards = \"" + dir + "/val\"\ntokenizer = \"" + dir + "/tok.json\"\n"
                                      "[train]\nsteps = 4\nbatch_size = 4\nckpt_every = 2\nthreads = 1\n"
                                      "[eval]\nsamples = 4\n";
  CliResult a = run("train --config " + dir + "/run.toml --run-dir " + dir + "/r --quiet --set train.steps=2");
  ASSERT_EQ(a.code, 0) << a.out;
  CliResult b = run("train --run-dir " + dir + "/r --resume --quiet --set train.steps=4");
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_NE(b.out.find("trained steps 3..4"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("held-out VQA accuracy"), std::string::npos) << b.out;
  CliResult e = run("eval --run-dir " + dir + "/r --samples 4 --out " + dir + "/eval.json");
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_NE(e.out.find("\"vqa_accuracy\""), std::string::npos);
  std::ifstream in(dir + "/eval.json");
  EXPECT_TRUE(in.good());
}

}  // namespace
