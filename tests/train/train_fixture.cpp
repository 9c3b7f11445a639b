// The tiny training fixture.
#include "train_fixture.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data/tokenizer/bpe_trainer.h"
#include "data/tokenizer/tokenizer.h"
#include "data/tools/synth_shapes.h"
#include "model/hf_export.h"
#include "track/metrics.h"
#include "train/device_batch.h"
#include "train/optimizer.h"
#include "train/trainer.h"

namespace vlm::testing {

namespace {

// The shapes corpus the fixture's tokenizers are trained on.
std::vector<std::string> shapes_corpus() {
  std::vector<std::string> corpus = {"<|im_start|>user\n", "<|im_end|>\n", "<|im_start|>assistant\n",
                                     "describe the image."};
  for (uint64_t i = 0; i < 160; ++i) {
    SynthShapesSample s = synth_shapes_sample(1, i, 16);
    corpus.push_back(s.caption);
    for (const auto& qa : s.qa) {
      corpus.push_back(qa.question);
      corpus.push_back(qa.answer);
    }
  }
  return corpus;
}

}  // namespace

RunConfig tiny_run_config(const std::string& dir) {
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    SynthShapesOptions so;
    so.image_size = 16;
    so.samples_per_shard = 40;
    so.seed = 1;
    so.samples = 160;
    so.out_dir = dir + "/train";
    EXPECT_TRUE(synth_shapes_write(so).ok());
    so.seed = 2;
    so.samples = 20;
    so.out_dir = dir + "/val";
    EXPECT_TRUE(synth_shapes_write(so).ok());
    BpeTrainOptions bo;
    bo.vocab_size = 300;
    bo.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<pad>"};
    auto tok = train_bpe(shapes_corpus(), bo);
    EXPECT_TRUE(tok.ok());
    EXPECT_TRUE(tok->save(dir + "/tokenizer.json").ok());
  }
  RunConfig c;
  c.model.vision = {16, 4, 3, 16, 1, 2, 32, 1e-6f};
  c.model.projector = {2, 0};
  c.model.text.vocab_size = 300;
  c.model.text.hidden = 32;
  c.model.text.layers = 1;
  c.model.text.heads = 4;
  c.model.text.kv_heads = 2;
  c.model.text.intermediate = 48;
  c.model.text.max_seq_len = 256;
  c.data.train_shards = dir + "/train";
  c.data.val_shards = dir + "/val";
  c.data.tokenizer = dir + "/tokenizer.json";
  c.data.task = "mixed";
  c.data.max_turns = 3;
  c.train.steps = 6;
  c.train.batch_size = 4;
  c.train.grad_accum = 2;
  c.train.warmup_steps = 2;
  c.train.adamw.lr = 3e-3f;
  c.train.ckpt_every = 3;
  c.train.threads = 2;
  c.eval.samples = 5;
  c.eval.max_new_tokens = 4;
  return c;
}

RunConfig tiny_idefics3_run_config(const std::string& dir) {
  RunConfig c = tiny_run_config(dir);
  c.data.tokenizer = dir + "/tokenizer_idefics3.json";
  c.data.val_shards = "";
  c.train.init_from = dir + "/smolvlm";
  if (std::filesystem::exists(c.train.init_from + "/preprocessor_config.json")) return c;
  BpeTrainOptions bo;
  bo.vocab_size = 300;
  bo.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<pad>", "<fake_token_around_image>",
                       "<global-img>", "<row_1_col_1>", "<row_1_col_2>", "<row_2_col_1>", "<row_2_col_2>"};
  auto tok = train_bpe(shapes_corpus(), bo);
  EXPECT_TRUE(tok.ok());
  EXPECT_TRUE(tok->save(c.data.tokenizer).ok());
  VlmModel m(c.model, Device::cpu());
  m.init_weights(11);
  HfExportOptions eo;
  eo.image_token_id = tok.ok() ? tok->token_to_id("<image>").value_or(-1) : -1;
  const Status exported = hf_export_model(m, c.train.init_from, eo);
  EXPECT_TRUE(exported.ok()) << exported.to_string();
  std::ofstream(c.train.init_from + "/preprocessor_config.json")
      << R"({"image_processor_type": "Idefics3ImageProcessor", "do_image_splitting": true, "resample": 1,
             "size": {"longest_edge": 32}, "max_image_size": {"longest_edge": 16}})";
  return c;
}

TrainerOptions trainer_options(const RunConfig& config, const std::string& run_dir) {
  TrainerOptions o;
  o.config = config;
  o.resolved_toml = "# test\n";
  o.run_dir = run_dir;
  o.quiet = true;
  return o;
}

std::vector<double> train_losses(const std::string& run_dir, bool must_exist) {
  auto records = read_jsonl_metrics(run_dir + "/metrics.jsonl");
  if (must_exist) {
    EXPECT_TRUE(records.ok()) << run_dir;
  }
  std::vector<double> out;
  if (!records.ok()) return out;
  for (const auto& r : *records) {
    double loss;
    if (r.kind == "train" && r.get("loss", &loss)) out.push_back(loss);
  }
  return out;
}

std::vector<double> plain_loop_losses(const RunConfig& c, Device device) {
  auto tokenizer = Tokenizer::load(c.data.tokenizer);
  EXPECT_TRUE(tokenizer.ok());
  auto data = make_data_options(c, c.data.train_shards, false);
  EXPECT_TRUE(data.ok());
  auto loader = VlmBatchLoader::open(*data, *tokenizer);
  EXPECT_TRUE(loader.ok());
  auto dtype = training_compute_dtype(c.train);
  auto recompute = parse_recompute(c.train.recompute);
  EXPECT_TRUE(dtype.ok() && recompute.ok());
  VlmModel model(c.model, device, *dtype);
  model.init_weights(static_cast<uint64_t>(c.train.seed));
  model.set_recompute(*recompute);
  AdamW opt(model.params(), c.train.adamw);
  std::vector<double> losses;
  for (int64_t step = 1; step <= c.train.steps; ++step) {
    model.params().zero_grads();
    std::vector<PackedBatch> micro;
    int64_t target_tokens = 0;
    for (int m = 0; m < c.train.grad_accum; ++m) {
      auto b = (*loader)->next_batch(c.train.batch_size);
      EXPECT_TRUE(b.ok());
      target_tokens += static_cast<int64_t>(b->loss_rows.size());
      micro.push_back(std::move(*b));
    }
    double loss_sum = 0;
    const float grad_scale = 1.f / static_cast<float>(target_tokens);
    for (const auto& b : micro)
      if (b.n_samples > 0) loss_sum += model.forward_backward(to_model_inputs(b, device), grad_scale).loss_sum();
    losses.push_back(loss_sum / static_cast<double>(target_tokens));
    opt.step(lr_at_step(step, c.train.steps, c.train.warmup_steps, c.train.adamw.lr, c.train.min_lr_ratio));
  }
  return losses;
}

}  // namespace vlm::testing
