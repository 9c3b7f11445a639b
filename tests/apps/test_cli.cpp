// The `vlm` binary as a user meets it: generated help (commands, flags, environment variables), exit codes, errors
// that name the file, key and reason, and a tiny end-to-end run (synth -> tokenizer-train -> train -> eval -> resume).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/env.h"
#include "core/safetensors.h"
#include "testing/test_util.h"

namespace {

using CliResult = vlm::testing::CommandResult;

CliResult run(const std::string& args) { return vlm::testing::run_command(VLM_BINARY, args); }

TEST(Cli, HelpIsGeneratedFromTheOptionDeclarations) {
  CliResult r = run("train --help");
  EXPECT_EQ(r.code, 0);
  for (const char* s : {"--config", "--resume", "train.lr", "model.text.kv_heads", "data.train_shards", "eval.samples"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  EXPECT_EQ(run("").code, 2);
  EXPECT_EQ(run("frobnicate").code, 2);
  EXPECT_EQ(run("data synth --help").code, 0);
}

// The command lines of a help text's "<heading>:" section ("  name [subcommand]  summary"): the names.
std::vector<std::string> listed(const std::string& help, const std::string& heading) {
  std::istringstream in(help.substr(help.find(heading + ":\n") + heading.size() + 2));
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line) && line.rfind("  ", 0) == 0;)
    names.push_back(line.substr(2, line.find("  ", 2) - 2));
  return names;
}

// `vlm --help` lists what the dispatch tables run (the data tools and benchmarks as "data <tool>" and
// "bench <benchmark>"), `vlm data --help` and `vlm bench --help` their own, and every listed command answers --help.
TEST(Cli, HelpListsEveryCommandAndEachAnswersHelp) {
  const CliResult r = run("--help");
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--help-env"), std::string::npos) << r.out;
  const std::vector<std::string> commands = listed(r.out, "commands");
  EXPECT_EQ(commands, (std::vector<std::string>{"train", "eval", "forward", "convert", "generate", "serve", "data synth",
                                                "data build", "data inspect", "data dedup", "data filter",
                                                "data tokenizer-train", "launch", "bench attention", "bench comm",
                                                "bench decode", "bench data", "bench train", "report"}))
      << r.out;
  for (const auto& [level, noun] : {std::pair{"data", "tools"}, std::pair{"bench", "benchmarks"}}) {
    const CliResult sub = run(std::string(level) + " --help");
    EXPECT_EQ(sub.code, 0) << sub.out;
    std::vector<std::string> expected;
    for (const std::string& c : commands)
      if (c.rfind(std::string(level) + " ", 0) == 0) expected.push_back(c.substr(std::string(level).size() + 1));
    EXPECT_EQ(listed(sub.out, noun), expected) << sub.out;
    EXPECT_EQ(run(level).code, 2);
    const CliResult unknown = run(std::string(level) + " frobnicate");
    EXPECT_EQ(unknown.code, 2);
    EXPECT_NE(unknown.out.find("unknown"), std::string::npos) << unknown.out;
  }
  for (const std::string& c : commands) {
    const CliResult h = run(c + " --help");
    EXPECT_EQ(h.code, 0) << c << ": " << h.out;
    EXPECT_NE(h.out.find("vlm " + c), std::string::npos) << c << ": " << h.out;
  }
}

// `vlm --help-env` lists every declared environment variable; --markdown prints docs/env.md's text.
TEST(Cli, HelpEnvListsEveryRegistryEntry) {
  const CliResult r = run("--help-env");
  ASSERT_EQ(r.code, 0);
  for (const vlm::env::Var& v : vlm::env::registry()) {
    EXPECT_NE(r.out.find(std::string("  ") + v.name + "="), std::string::npos) << v.name;
    EXPECT_NE(r.out.find(v.meaning), std::string::npos) << v.name;
  }
  const CliResult md = run("--help-env --markdown");
  EXPECT_EQ(md.code, 0);
  EXPECT_EQ(md.out, vlm::env::markdown());
  EXPECT_EQ(run("--help-env --bogus").code, 2);
}

// `vlm bench train` parses its options before it looks for a GPU, so a bad value fails with exit code 2 anywhere.
TEST(Cli, BenchTrainOptions) {
  CliResult r = run("bench train --help");
  EXPECT_EQ(r.code, 0);
  for (const char* s : {"--grad-clip", "--trace-steps", "--profile-steps", "--peer", "--fsdp", "--baseline-json",
                        "--device", "--reduce-dtype"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  for (const char* bad : {"--grad-clip -1", "--grad-clip abc", "--grad-clip nan", "--grad-clip inf",
                          "--trace-steps -1", "--batch 0", "--fsdp half_shard", "--device tpu",
                          "--reduce-dtype f16"}) {
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
  EXPECT_NE(b.out.find("vqa: accuracy"), std::string::npos) << b.out;
  CliResult e = run("eval --run-dir " + dir + "/r --samples 4 --out " + dir + "/eval.json");
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_NE(e.out.find("vqa: accuracy"), std::string::npos) << e.out;  // data.task = vqa: the vqa task only
  EXPECT_EQ(e.out.find("caption"), std::string::npos) << e.out;
  std::ifstream in(dir + "/eval.json");
  EXPECT_TRUE(in.good());
  // A caption-only eval prints caption metrics and nothing about VQA; the examples setting is honoured.
  CliResult c = run("eval --run-dir " + dir + "/r --samples 4 --task caption --examples 2 --out " + dir + "/cap.json");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_NE(c.out.find("caption: CIDEr-D"), std::string::npos) << c.out;
  EXPECT_EQ(c.out.find("vqa"), std::string::npos) << c.out;
  EXPECT_EQ(c.out.find("VQA"), std::string::npos) << c.out;
  std::ifstream cap(dir + "/cap.json");
  std::string cap_json((std::istreambuf_iterator<char>(cap)), std::istreambuf_iterator<char>());
  EXPECT_EQ(cap_json.find("\"vqa\""), std::string::npos);
  size_t examples = 0;
  for (size_t at = cap_json.find("\"prediction\""); at != std::string::npos; at = cap_json.find("\"prediction\"", at + 1))
    ++examples;
  EXPECT_EQ(examples, 2u);
  CliResult j = run("eval --run-dir " + dir + "/r --samples 4 --task vqa,retrieval --set eval.retrieval_samples=3 --json");
  ASSERT_EQ(j.code, 0) << j.out;
  EXPECT_NE(j.out.find("\"retrieval\""), std::string::npos) << j.out;
  EXPECT_NE(j.out.find("\"image_to_text\""), std::string::npos) << j.out;
  CliResult bad = run("eval --run-dir " + dir + "/r --task captions");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find("'captions'"), std::string::npos) << bad.out;

  // The run out to a Hugging Face folder and back into a vlm model folder: both forward to the same logits.
  CliResult x = run("convert " + dir + "/r --to hf --out " + dir + "/hf");
  ASSERT_EQ(x.code, 0) << x.out;
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                        "tokenizer_config.json", "preprocessor_config.json"})
    EXPECT_TRUE(std::ifstream(dir + "/hf/" + f).good()) << f;
  std::stringstream tok_config;
  tok_config << std::ifstream(dir + "/hf/tokenizer_config.json").rdbuf();
  EXPECT_NE(tok_config.str().find("{{ '<|im_start|>user\\\\n' + message['content']"), std::string::npos)
      << tok_config.str();  // the run's ChatML template, as Jinja
  CliResult y = run("convert --from hf " + dir + "/hf --out " + dir + "/mine");
  ASSERT_EQ(y.code, 0) << y.out;
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  ASSERT_TRUE(vlm::safetensors_save(dir + "/in.safetensors",
                                    {{"input_ids", vlm::Tensor::from_vector(ids, {2, 5})}}).ok());
  for (const char* m : {"hf", "mine"}) {
    CliResult f = run(std::string("forward ") + dir + "/" + m + " --inputs " + dir + "/in.safetensors --out " + dir +
                      "/out_" + m + ".safetensors");
    ASSERT_EQ(f.code, 0) << f.out;
  }
  auto a_out = vlm::safetensors_load(dir + "/out_hf.safetensors");
  auto b_out = vlm::safetensors_load(dir + "/out_mine.safetensors");
  ASSERT_TRUE(a_out.ok() && b_out.ok());
  EXPECT_EQ(a_out->tensors.at("logits").shape(), vlm::Shape({2, 5, 300}));
  EXPECT_TRUE(vlm::testing::all_close(a_out->tensors.at("logits"), b_out->tensors.at("logits"), 0, 0));
  // A folder without config.json is named in the error.
  CliResult no_config = run("forward " + dir + "/val --inputs " + dir + "/in.safetensors --out " + dir + "/x.safetensors");
  EXPECT_EQ(no_config.code, 1);
  EXPECT_NE(no_config.out.find("config.json"), std::string::npos) << no_config.out;
}

}  // namespace
