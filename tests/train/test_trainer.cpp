// The training loop end to end on a tiny model: bit-exact resume, checkpoint rotation, run-directory protection,
// metrics and eval outputs, freezing, and that training lowers the loss.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "testing/test_util.h"
#include "track/metrics.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "train_fixture.h"

namespace vlm {
namespace {

using testing::trainer_options;
using testing::train_losses;

std::string data_dir() {
  static const std::string dir = testing::scratch_dir("train_data");
  return dir;
}

TEST(Trainer, ResumedRunReproducesTheUninterruptedRunBitForBit) {
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.val_shards = "";  // eval is not part of this test
  const std::string root = testing::scratch_dir("resume");

  auto full = run_training(trainer_options(c, root + "/full"));
  ASSERT_TRUE(full.ok()) << full.status().to_string();

  TrainerOptions first = trainer_options(c, root + "/split");
  first.stop_after_step = 3;  // "killed" right after the step-3 checkpoint
  auto part1 = run_training(first);
  ASSERT_TRUE(part1.ok()) << part1.status().to_string();
  EXPECT_EQ(part1->final_step, 3);
  TrainerOptions second = trainer_options(c, root + "/split");
  second.resume = true;
  auto part2 = run_training(second);
  ASSERT_TRUE(part2.ok()) << part2.status().to_string();
  EXPECT_EQ(part2->start_step, 3);
  EXPECT_EQ(part2->final_step, 6);

  const auto a = train_losses(root + "/full"), b = train_losses(root + "/split");
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;  // exact equality
  auto wa = read_file_bytes(root + "/full/checkpoints/step_00000006/model.safetensors");
  auto wb = read_file_bytes(root + "/split/checkpoints/step_00000006/model.safetensors");
  ASSERT_TRUE(wa.ok() && wb.ok());
  EXPECT_TRUE(*wa == *wb) << "final weights differ";
}

TEST(Trainer, ResumeAfterACrashPastTheCheckpointRewritesLaterMetrics) {
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.val_shards = "";
  const std::string dir = testing::scratch_dir("crash");
  TrainerOptions first = trainer_options(c, dir);
  first.stop_after_step = 5;  // checkpoint at 3, metrics up to 5
  ASSERT_TRUE(run_training(first).ok());
  EXPECT_EQ(train_losses(dir).size(), 5u);
  TrainerOptions second = trainer_options(c, dir);
  second.resume = true;
  ASSERT_TRUE(run_training(second).ok());
  EXPECT_EQ(train_losses(dir).size(), 6u);  // steps 4 and 5 were redone, not duplicated
}

TEST(Trainer, RefusesToOverwriteARunWithoutResume) {
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.val_shards = "";
  c.train.steps = 3;
  const std::string dir = testing::scratch_dir("protect");
  ASSERT_TRUE(run_training(trainer_options(c, dir)).ok());
  auto again = run_training(trainer_options(c, dir));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("--resume"), std::string::npos);
}

TEST(Trainer, KeepsTheNewestCheckpointsAndWritesEval) {
  RunConfig c = testing::tiny_run_config(data_dir());
  c.train.steps = 8;
  c.train.ckpt_every = 2;
  c.train.keep_last = 2;
  c.eval.every = 4;
  c.eval.tasks = {"vqa", "caption", "retrieval"};  // three eval curves in metrics.jsonl
  c.eval.retrieval_samples = 4;
  const std::string dir = testing::scratch_dir("ckpt");
  auto r = run_training(trainer_options(c, dir));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto list = CheckpointManager(dir + "/checkpoints", 2).list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].step, 6);
  EXPECT_EQ(list[1].step, 8);
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "trainer_state.json"})
    EXPECT_TRUE(std::filesystem::exists(list[1].path + "/" + f)) << f;
  EXPECT_TRUE(std::filesystem::exists(dir + "/eval/step_4.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/eval/final.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/config.toml"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/run.json"));
  ASSERT_TRUE(r->has_eval);
  EXPECT_EQ(r->eval.images, 5);
  ASSERT_TRUE(r->eval.vqa && r->eval.caption && r->eval.retrieval);
  EXPECT_GT(r->eval.vqa->questions, 5);
  EXPECT_EQ(r->eval.caption->captions, 5);
  auto records = read_jsonl_metrics(dir + "/metrics.jsonl");
  ASSERT_TRUE(records.ok());
  int evals = 0;
  for (const auto& rec : *records) {
    double v;
    if (rec.kind == "eval") {
      ++evals;
      for (const char* k : {"eval/vqa/accuracy", "eval/vqa/exact_match", "eval/caption/cider_d", "eval/caption/bleu_4",
                            "eval/caption/rouge_l", "eval/retrieval/i2t_r1", "eval/retrieval/t2i_r5"})
        EXPECT_TRUE(rec.get(k, &v)) << k;
    } else {
      for (const char* k : {"loss", "lr", "grad_norm", "samples_per_s", "tokens_per_s"})
        EXPECT_TRUE(rec.get(k, &v)) << k;
    }
  }
  EXPECT_EQ(evals, 2);
}

TEST(Trainer, TrainingLowersTheLoss) {
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.val_shards = "";
  c.train.steps = 40;
  c.train.ckpt_every = 0;
  c.train.grad_accum = 1;
  c.train.batch_size = 8;
  const std::string dir = testing::scratch_dir("learns");
  ASSERT_TRUE(run_training(trainer_options(c, dir)).ok());
  const auto l = train_losses(dir);
  ASSERT_EQ(l.size(), 40u);
  const double first = (l[0] + l[1] + l[2]) / 3, last = (l[37] + l[38] + l[39]) / 3;
  EXPECT_LT(last, 0.7 * first) << "loss " << first << " -> " << last;
}

TEST(Trainer, RecomputingBlocksTrainsTheSameLossesAndWeights) {
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.val_shards = "";
  c.train.steps = 3;
  c.train.ckpt_every = 0;
  const std::string root = testing::scratch_dir("recompute");
  ASSERT_TRUE(run_training(trainer_options(c, root + "/none")).ok());
  c.train.recompute = "blocks";
  auto r = run_training(trainer_options(c, root + "/blocks"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto a = train_losses(root + "/none"), b = train_losses(root + "/blocks");
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;  // exact equality
  auto wa = read_file_bytes(root + "/none/checkpoints/step_00000003/model.safetensors");
  auto wb = read_file_bytes(root + "/blocks/checkpoints/step_00000003/model.safetensors");
  ASSERT_TRUE(wa.ok() && wb.ok());
  EXPECT_TRUE(*wa == *wb) << "final weights differ";
  c.train.recompute = "some";  // a config built in code bypasses the run-file check: the trainer still refuses it
  auto bad = run_training(trainer_options(c, root + "/bad"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("train.recompute: 'some' is not one of none, blocks"), std::string::npos)
      << bad.status().message();
}

TEST(Trainer, FrozenPartsDoNotChange) {
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.val_shards = "";
  c.train.steps = 2;
  c.train.ckpt_every = 0;
  c.train.freeze = {"vision", "text"};
  const std::string dir = testing::scratch_dir("freeze");
  ASSERT_TRUE(run_training(trainer_options(c, dir)).ok());
  // Compare against the initial weights of an untrained model of the same seed.
  VlmModel init(c.model, Device::cpu());
  init.init_weights(static_cast<uint64_t>(c.train.seed));
  auto trained = safetensors_load(dir + "/checkpoints/step_00000002/model.safetensors");
  ASSERT_TRUE(trained.ok());
  int changed_projector = 0;
  for (const auto& p : init.params().all()) {
    const Tensor& t = trained->tensors.at(p.name);
    const bool same = std::equal(t.data<float>(), t.data<float>() + t.numel(), p.value.data<float>());
    if (p.group == ParamGroup::projector)
      changed_projector += !same;
    else
      EXPECT_TRUE(same) << p.name << " changed although frozen";
  }
  EXPECT_GT(changed_projector, 0);
}

TEST(Trainer, BadInputsAreClearErrors) {
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.tokenizer = "/nonexistent/tokenizer.json";
  auto r = run_training(trainer_options(c, testing::scratch_dir("bad1")));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/tokenizer.json"), std::string::npos);
  c = testing::tiny_run_config(data_dir());
  c.model.text.vocab_size = 100;  // smaller than the tokenizer
  r = run_training(trainer_options(c, testing::scratch_dir("bad2")));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.text.vocab_size"), std::string::npos);
  c = testing::tiny_run_config(data_dir());
  c.data.train_shards = data_dir() + "/nothing-{0..3}.tar";
  r = run_training(trainer_options(c, testing::scratch_dir("bad3")));
  ASSERT_FALSE(r.ok());
  c = testing::tiny_run_config(data_dir());
  c.train.precision = "bf16";  // the CPU backend is fp32 only
  r = run_training(trainer_options(c, testing::scratch_dir("bad4")));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("train.precision = \"bf16\" needs train.device = cuda"), std::string::npos)
      << r.status().message();
}

// A step's loss is read after the next step is queued, yet a non-finite loss still stops the run naming its step,
// and no checkpoint of that step (or later) is written: the step is checked before its checkpoint.
TEST(Trainer, ANonFiniteLossStopsTheRunBeforeItsCheckpoint) {
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.val_shards = "";
  c.train.steps = 5;
  c.train.warmup_steps = 0;
  c.train.ckpt_every = 1;
  c.train.keep_last = 10;
  c.train.adamw.lr = 1e30f;  // step 1's update leaves weights near 1e30: step 2's forward overflows
  const std::string dir = testing::scratch_dir("nan_loss");
  auto r = run_training(trainer_options(c, dir));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("loss became"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("at step 2;"), std::string::npos) << r.status().message();
  EXPECT_TRUE(std::filesystem::exists(dir + "/checkpoints/step_00000001"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/checkpoints/step_00000002"));
  const auto logged = train_losses(dir);
  ASSERT_FALSE(logged.empty());
  EXPECT_TRUE(std::isfinite(logged.front()));
}

TEST(Trainer, WritesTheMemoryReportOfTheFirstStep) {
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.val_shards = "";
  c.train.steps = 2;
  c.train.ckpt_every = 0;
  c.train.freeze = {"vision"};
  const std::string dir = testing::scratch_dir("memory");
  ASSERT_TRUE(run_training(trainer_options(c, dir)).ok());
  auto bytes = read_file_bytes(dir + "/memory.json");
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  const auto j = nlohmann::json::parse(bytes->begin(), bytes->end(), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  VlmModel model(c.model, Device::cpu());
  const uint64_t all = static_cast<uint64_t>(model.params().numel());
  uint64_t trainable = 0;
  for (const auto& p : model.params().all())
    if (p.group != ParamGroup::vision) trainable += static_cast<uint64_t>(p.value.numel());
  EXPECT_EQ(j.at("device").get<std::string>(), "cpu");
  EXPECT_EQ(j.at("precision").get<std::string>(), "fp32");
  EXPECT_EQ(j.at("parameters_master_bytes").get<uint64_t>(), 4 * all);
  EXPECT_EQ(j.at("parameters_compute_copy_bytes").get<uint64_t>(), 0u);  // fp32: the ops read the masters
  EXPECT_EQ(j.at("parameters_bytes").get<uint64_t>(), 4 * all);
  EXPECT_EQ(j.at("gradients_bytes").get<uint64_t>(), 4 * all);
  EXPECT_EQ(j.at("optimizer_moments_bytes").get<uint64_t>(), 2 * 4 * trainable);  // frozen parts have no moments
  // The forward/backward's transient memory was measured; the persistent state was in use when the step began.
  EXPECT_GT(j.at("activations_peak_bytes").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("step_peak_bytes").get<uint64_t>(),
            j.at("step_start_bytes").get<uint64_t>() + j.at("activations_peak_bytes").get<uint64_t>());
  EXPECT_GE(j.at("step_start_bytes").get<uint64_t>(),
            j.at("parameters_bytes").get<uint64_t>() + j.at("gradients_bytes").get<uint64_t>() +
                j.at("optimizer_moments_bytes").get<uint64_t>());
}

}  // namespace
}  // namespace vlm
