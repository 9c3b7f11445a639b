// The tiny training fixture.
#include "train_fixture.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "data/synth_shapes.h"
#include "data/tokenizer/bpe_trainer.h"

namespace vlm::testing {

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
    BpeTrainOptions bo;
    bo.vocab_size = 300;
    bo.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<pad>"};
    auto tok = train_bpe(corpus, bo);
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
  c.train.lr = 3e-3f;
  c.train.ckpt_every = 3;
  c.train.threads = 2;
  c.eval.samples = 5;
  c.eval.max_new_tokens = 4;
  return c;
}

}  // namespace vlm::testing
