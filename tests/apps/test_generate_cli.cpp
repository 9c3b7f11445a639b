// `vlm generate` end to end on a tiny trained run: the single-prompt mode, and a requests file in which good
// requests are answered while bad ones (invalid JSON, an unknown key, a missing, corrupt or oversized image,
// max_tokens 0) get error lines naming them; the same image in two requests shares its prompt's KV blocks.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "data/image/image.h"
#include "data/loader/idefics3_prompt.h"
#include "data/loader/prompt.h"
#include "data/tools/synth_shapes.h"
#include "testing/test_util.h"
#include "train_fixture.h"

namespace vlm {
namespace {

using CliResult = testing::CommandResult;

CliResult run(const std::string& args) { return testing::run_command(VLM_BINARY, args); }

void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string png_of(const Image& image) {
  auto png = encode_png(image);
  EXPECT_TRUE(png.ok());
  return std::string(png->begin(), png->end());
}

// A tiny run trained for two steps through `vlm train` (so its config.toml is what a user's run holds).
std::string trained_run() {
  static const std::string run_dir = [] {
    const std::string dir = testing::scratch_dir("generate_cli");
    const RunConfig c = testing::tiny_run_config(dir);
    const std::string toml = dir + "/run.toml";
    write_file(toml,
               "[model]\nvision.image_size = 16\nvision.patch_size = 4\nvision.hidden = 16\nvision.layers = 1\n"
               "vision.heads = 2\nvision.mlp_hidden = 32\ntext.vocab_size = 300\ntext.hidden = 32\n"
               "text.layers = 1\ntext.heads = 4\ntext.kv_heads = 2\ntext.intermediate = 48\n"
               "text.max_seq_len = 256\n[data]\ntrain_shards = \"" +
                   c.data.train_shards + "\"\ntokenizer = \"" + c.data.tokenizer +
                   "\"\ntask = \"mixed\"\n[train]\nsteps = 2\nbatch_size = 4\nckpt_every = 2\nwarmup_steps = 1\n");
    const CliResult r = run("train --config " + toml + " --run-dir " + dir + "/run --quiet");
    EXPECT_EQ(r.code, 0) << r.out;
    return dir + "/run";
  }();
  return run_dir;
}

TEST(GenerateCli, OnePromptWithAnImage) {
  const std::string run_dir = trained_run();
  const std::string img = run_dir + "/../square.png";
  write_file(img, png_of(synth_shapes_sample(1, 0, 16).image));
  const CliResult r =
      run("generate " + run_dir + " --prompt 'what color is the square?' --image " + img + " --max-tokens 4");
  EXPECT_EQ(r.code, 0) << r.out;
  // Two sampled completions, forked after the prompt, printed "[0] ..." and "[1] ...".
  const CliResult two = run("generate " + run_dir + " --prompt 'describe the image.' --image " + img +
                            " --max-tokens 4 --n 2 --temperature 0.9 --seed 5");
  EXPECT_EQ(two.code, 0) << two.out;
  EXPECT_NE(two.out.find("[1] "), std::string::npos) << two.out;
  const CliResult missing = run("generate " + run_dir + " --prompt hi --image " + run_dir + "/none.png");
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.out.find("none.png"), std::string::npos) << missing.out;
  EXPECT_EQ(run("generate " + run_dir).code, 1);  // neither --prompt nor --requests
  EXPECT_EQ(run("generate /nonexistent --prompt hi").code, 1);
}

TEST(GenerateCli, RequestsFileAnswersGoodRequestsAndNamesBadOnes) {
  const std::string run_dir = trained_run();
  const std::string dir = run_dir + "/..";
  const std::string img = dir + "/a.png", corrupt = dir + "/corrupt.png", big = dir + "/big.png";
  write_file(img, png_of(synth_shapes_sample(1, 3, 16).image));
  std::string bad = png_of(synth_shapes_sample(1, 4, 16).image);
  bad.resize(bad.size() / 2);  // a truncated PNG: same header, broken data
  write_file(corrupt, bad);
  write_file(big, png_of(synth_shapes_sample(1, 5, 64).image));  // 4096 pixels, over the limit set below
  const std::string in = dir + "/in.jsonl", out = dir + "/out.jsonl";
  write_file(
      in, "{\"id\": \"a\", \"prompt\": \"what color is the square?\", \"images\": [\"" + img +
              "\"]}\n"
              "{\"id\": \"b\", \"prompt\": \"what color is the square?\", \"images\": [\"" +
              img +
              "\"]}\n"
              "{not json\n"
              "{\"id\": \"d\", \"prompt\": \"x\", \"images\": [\"" +
              dir +
              "/missing.png\"]}\n"
              "{\"id\": \"e\", \"prompt\": \"x\", \"images\": [\"" +
              corrupt +
              "\"]}\n"
              "{\"id\": \"f\", \"prompt\": \"x\", \"images\": [\"" +
              big +
              "\"]}\n"
              "{\"id\": \"g\", \"prompt\": \"x\", \"max_tokens\": 0}\n"
              "{\"id\": \"h\", \"prompt\": \"x\", \"bogus\": 1}\n"
              "\n"
              "{\"id\": 9, \"prompt\": \"describe the image.\", \"temperature\": 0.8, \"seed\": 3, \"logprobs\": 2}\n");
  const CliResult r = run("generate " + run_dir + " --requests " + in + " --out " + out +
                          " --max-tokens 5 --block-size 4 --max-num-seqs 1 --set data.max_pixels=1000 --quiet");
  EXPECT_EQ(r.code, 1) << r.out;  // some requests failed
  std::ifstream f(out);
  std::map<std::string, nlohmann::json> answers;
  std::string line;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line);
    answers[j["id"].get<std::string>()] = j;
  }
  ASSERT_EQ(answers.size(), 9u) << r.out;
  auto error_of = [&](const std::string& id) {
    return answers[id].contains("error") ? answers[id]["error"].get<std::string>() : std::string("(no error)");
  };
  EXPECT_NE(error_of("line3").find("in.jsonl:3: not valid JSON"), std::string::npos) << error_of("line3");
  EXPECT_NE(error_of("d").find("missing.png"), std::string::npos) << error_of("d");
  EXPECT_NE(error_of("e").find("corrupt.png"), std::string::npos) << error_of("e");
  EXPECT_NE(error_of("f").find("big.png"), std::string::npos) << error_of("f");
  EXPECT_NE(error_of("g").find("max_tokens"), std::string::npos) << error_of("g");
  EXPECT_NE(error_of("h").find("bogus"), std::string::npos) << error_of("h");
  for (const char* id : {"a", "b", "9"}) {
    ASSERT_FALSE(answers[id].contains("error")) << id << ": " << answers[id].dump();
    EXPECT_GE(answers[id]["completions"][0]["tokens"].size(), 1u);
  }
  EXPECT_EQ(answers["9"]["completions"][0]["top_logprobs"][0].size(), 2u);
  // Greedy, same prompt and image: the same answer, and b (run after a: one sequence at a time) found a's blocks.
  EXPECT_EQ(answers["a"]["completions"][0]["tokens"], answers["b"]["completions"][0]["tokens"]);
  EXPECT_GT(answers["b"]["cached_prompt_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(answers["a"]["cached_prompt_tokens"].get<int64_t>(), 0);
}

// A run fine-tuned from a SmolVLM folder (Idefics3 preprocessor_config.json, a tokenizer with the layout tokens)
// generates with the tiling it trained with: the request's prompt is the tiled one, token for token as long.
TEST(GenerateCli, ARunFineTunedFromASmolVlmFolderGeneratesWithItsTiling) {
  const std::string dir = testing::scratch_dir("generate_cli_idefics3");
  const RunConfig c = testing::tiny_idefics3_run_config(dir);
  const std::string toml = dir + "/run.toml";
  write_file(toml, "[data]\ntrain_shards = \"" + c.data.train_shards + "\"\ntokenizer = \"" + c.data.tokenizer +
                       "\"\ntask = \"mixed\"\n[train]\nsteps = 2\nbatch_size = 4\nckpt_every = 2\nwarmup_steps = 1\n"
                       "init_from = \"" + c.train.init_from + "\"\n");
  const CliResult trained = run("train --config " + toml + " --run-dir " + dir + "/run --quiet");
  ASSERT_EQ(trained.code, 0) << trained.out;
  const std::string img = dir + "/a.png", in = dir + "/in.jsonl", out = dir + "/out.jsonl";
  write_file(img, png_of(synth_shapes_sample(1, 3, 16).image));
  write_file(in, "{\"id\": \"a\", \"prompt\": \"what color is the square?\", \"images\": [\"" + img + "\"]}\n");
  const CliResult r = run("generate " + dir + "/run --requests " + in + " --out " + out + " --max-tokens 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Idefics3 tiles of 16 px"), std::string::npos) << r.out;
  std::ifstream f(out);
  std::string line;
  ASSERT_TRUE(std::getline(f, line));
  const auto answer = nlohmann::json::parse(line);
  // The chat template's prompt with the image's layout: 2 x 2 tiles of a 32 px upscale plus the global image.
  auto tok = Tokenizer::load(c.data.tokenizer);
  auto chat = chat_template_by_name("chat");
  ASSERT_TRUE(tok.ok() && chat.ok());
  Idefics3Options o;
  o.longest_edge = 32;
  o.max_image_size = 16;
  o.image_seq_len = 4;
  const Idefics3Layout layout = idefics3_layout(16, 16, o);
  ASSERT_EQ(layout.tiles.size(), 4u);
  auto want = tokenize_chat_with_images(*tok, *chat, {{"what color is the square?", ""}},
                                        {idefics3_placeholder(*tok, layout, o, "<image>")}, true);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  EXPECT_EQ(answer["prompt_tokens"].get<int64_t>(), static_cast<int64_t>(want->tokens.size())) << line;
}

}  // namespace
}  // namespace vlm
