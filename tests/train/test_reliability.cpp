// What keeps a run honest and resumable: a step without target tokens is not an optimizer step, a run made mostly of
// bad samples stops naming the reason (no checkpoint claiming progress), a damaged newest checkpoint falls back to
// the newest valid one (kept, the damaged one set aside), checkpoint verification catches each kind of damage, and
// pruning / interrupted-write leftovers never look like checkpoints.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/safetensors.h"
#include "data/io/tar.h"
#include "data/tools/synth_shapes.h"
#include "testing/test_util.h"
#include "track/metrics.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "train_fixture.h"

namespace vlm {
namespace {

using testing::trainer_options;
using testing::train_losses;
namespace fs = std::filesystem;

std::string data_dir() {
  static const std::string dir = testing::scratch_dir("reliability_data");
  return dir;
}

// One shard of `n` shapes samples (the fixture tokenizer's text) under dir; samples `from` and above are kept, those
// in `corrupt` get bytes that are no image.
std::string write_shards(const std::string& dir, int n, const std::set<int>& corrupt, int from = 0) {
  fs::create_directories(dir);
  auto w = TarWriter::create(dir + "/shard-000000.tar");
  EXPECT_TRUE(w.ok());
  for (int i = from; i < n; ++i) {
    SynthShapesSample s = synth_shapes_sample(1, static_cast<uint64_t>(i), 16);
    const std::vector<uint8_t> jpg =
        corrupt.count(i) ? std::vector<uint8_t>{'n', 'o', 't', ' ', 'a', ' ', 'j', 'p', 'e', 'g'} : *encode_jpeg(s.image, 90);
    EXPECT_TRUE((*w)->add(s.key + ".jpg", jpg).ok());
    EXPECT_TRUE((*w)->add(s.key + ".txt", s.caption).ok());
    EXPECT_TRUE((*w)->add(s.key + ".json", s.json()).ok());
  }
  EXPECT_TRUE((*w)->close().ok());
  return dir;
}

// The fixture's model on caption samples in read order (no per-sample random choice), one micro-batch per step.
RunConfig caption_config(const std::string& shards) {
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.val_shards = "";
  c.data.train_shards = shards;
  c.data.task = "caption";
  c.data.shuffle_shards = false;
  c.data.shuffle_window = 0;
  c.train.grad_accum = 1;
  c.train.batch_size = 4;
  c.train.steps = 5;
  c.train.ckpt_every = 0;
  c.train.adamw.weight_decay = 0.1f;
  return c;
}

TEST(Reliability, AStepWithoutTargetTokensIsNotAnOptimizerStep) {
  const std::string root = testing::scratch_dir("empty_step");
  // The first batch is all corrupt images: that step has no target token. Without it the run must be the run on the
  // shards without those samples, step for step (before, AdamW stepped on zero gradients: weight decay, moments and
  // the lr schedule moved, and a "step" was counted).
  auto with_bad =
      run_training(trainer_options(caption_config(write_shards(root + "/bad", 40, {0, 1, 2, 3})), root + "/a"));
  ASSERT_TRUE(with_bad.ok()) << with_bad.status().to_string();
  auto clean = run_training(trainer_options(caption_config(write_shards(root + "/good", 40, {}, 4)), root + "/b"));
  ASSERT_TRUE(clean.ok()) << clean.status().to_string();
  EXPECT_EQ(with_bad->final_step, 5);
  const auto a = train_losses(root + "/a", /*must_exist=*/false);
  const auto b = train_losses(root + "/b", /*must_exist=*/false);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 5u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;
  auto records = read_jsonl_metrics(root + "/a/metrics.jsonl");
  ASSERT_TRUE(records.ok());
  double v = 0;
  ASSERT_TRUE(records->back().get("bad_images", &v));
  EXPECT_EQ(v, 4.0);
  for (const auto& r : *records) {
    ASSERT_TRUE(r.get("target_tokens", &v));
    EXPECT_GT(v, 0.0) << "step " << r.step;
  }
}

TEST(Reliability, ARunOfUndecodableImagesFailsNamingTheReasonWithoutACheckpoint) {
  const std::string root = testing::scratch_dir("all_corrupt");
  std::set<int> all;
  for (int i = 0; i < 40; ++i) all.insert(i);
  const std::string shards = write_shards(root + "/shards", 40, all);
  for (const int epochs : {0, 1}) {  // data forever (the window fills) and one pass (the data runs out first)
    RunConfig c = caption_config(shards);
    c.data.epochs = epochs;
    c.data.skip_window = 200;
    c.train.ckpt_every = 1;
    const std::string dir = root + "/run" + std::to_string(epochs);
    auto r = run_training(trainer_options(c, dir));
    ASSERT_FALSE(r.ok()) << "before: exit 0, final loss 0, optimizer steps and a checkpoint";
    const std::string m = r.status().message();
    EXPECT_NE(m.find("main reason: bad_images"), std::string::npos) << m;
    EXPECT_NE(m.find("data.max_skip_fraction 0.5"), std::string::npos) << m;
    EXPECT_TRUE(CheckpointManager(dir + "/checkpoints", 3).list().empty());
    EXPECT_TRUE(train_losses(dir, /*must_exist=*/false).empty());
  }
}

TEST(Reliability, AShortRunMostlyOfBadSamplesStopsBeforeItsFinalCheckpoint) {
  const std::string root = testing::scratch_dir("mostly_bad");
  std::set<int> bad;
  for (int i = 0; i < 40; ++i)
    if (i % 4 != 0) bad.insert(i);  // 75% bad, yet every batch has one good sample
  RunConfig c = caption_config(write_shards(root + "/shards", 40, bad));
  auto r = run_training(trainer_options(c, root + "/run"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("15 of the 20 samples read were skipped"), std::string::npos)
      << r.status().message();
  EXPECT_TRUE(CheckpointManager(root + "/run/checkpoints", 3).list().empty());
  c.data.max_skip_fraction = 1.0;  // off: the run trains on what is left
  EXPECT_TRUE(run_training(trainer_options(c, root + "/tolerant")).ok());
}

// A checkpoint folder written by the trainer, for the CheckpointManager tests.
Status write_fake_checkpoint(const std::string& dir, int64_t step) {
  Tensor t = Tensor::empty({4}, DType::f32);
  for (int i = 0; i < 4; ++i) t.data<float>()[i] = static_cast<float>(i + step);
  VLM_RETURN_IF_ERROR(safetensors_save(dir + "/model.safetensors", {{"w", t}}));
  VLM_RETURN_IF_ERROR(safetensors_save(dir + "/optimizer.safetensors", {{"m", t}}));
  const std::string js = str("{\"step\": ", step, ", \"loader_state\": {}}\n");
  return write_file_atomic(dir + "/trainer_state.json", js.data(), js.size());
}

TEST(Reliability, VerifyNamesEachKindOfDamage) {
  const std::string dir = testing::scratch_dir("verify") + "/checkpoints";
  CheckpointManager m(dir, 10);
  for (int64_t s = 1; s <= 6; ++s)
    ASSERT_TRUE(m.save(s, [&](const std::string& d) { return write_fake_checkpoint(d, s); }).ok());
  auto all = m.list();
  ASSERT_EQ(all.size(), 6u);
  for (const auto& c : all) EXPECT_TRUE(m.verify(c).ok()) << m.verify(c).to_string();
  EXPECT_TRUE(fs::exists(all[0].path + "/manifest.json"));
  auto expect_damaged = [&](const CheckpointInfo& c, const std::string& words) {
    const Status s = m.verify(c);
    EXPECT_FALSE(s.ok()) << c.path;
    EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(c.path), std::string::npos) << s.message();
  };
  fs::remove(all[0].path + "/optimizer.safetensors");
  expect_damaged(all[0], "optimizer.safetensors is missing");
  fs::resize_file(all[1].path + "/model.safetensors", fs::file_size(all[1].path + "/model.safetensors") - 3);
  expect_damaged(all[1], "(truncated)");
  fs::remove(all[2].path + "/manifest.json");  // an older checkpoint without a manifest: the formats still checked
  fs::resize_file(all[2].path + "/model.safetensors", fs::file_size(all[2].path + "/model.safetensors") - 3);
  expect_damaged(all[2], "model.safetensors");
  const std::string bad_json = "{\"step\": 4, \"loader_";
  fs::remove(all[3].path + "/manifest.json");
  ASSERT_TRUE(write_file_atomic(all[3].path + "/trainer_state.json", bad_json.data(), bad_json.size()).ok());
  expect_damaged(all[3], "trainer_state.json: not a JSON object");
  const std::string other_step = "{\"step\": 3, \"loader_state\": {}}\n";
  fs::remove(all[4].path + "/manifest.json");
  ASSERT_TRUE(write_file_atomic(all[4].path + "/trainer_state.json", other_step.data(), other_step.size()).ok());
  expect_damaged(all[4], "records step 3, the folder says 5");
  const std::string longer = "{\"step\": 6, \"loader_state\": {}}\n\n\n";
  ASSERT_TRUE(write_file_atomic(all[5].path + "/trainer_state.json", longer.data(), longer.size()).ok());
  expect_damaged(all[5], "the manifest recorded");
  std::vector<DamagedCheckpoint> damaged;
  EXPECT_FALSE(m.latest_valid(&damaged));
  EXPECT_EQ(damaged.size(), 6u);
}

TEST(Reliability, PruningAndInterruptedWritesLeaveNothingThatLooksLikeACheckpoint) {
  const std::string dir = testing::scratch_dir("prune") + "/checkpoints";
  CheckpointManager m(dir, 2);
  for (int64_t s = 1; s <= 4; ++s)
    ASSERT_TRUE(m.save(s, [&](const std::string& d) { return write_fake_checkpoint(d, s); }).ok());
  auto all = m.list();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].step, 3);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"latest", "step_00000003", "step_00000004"}));
  // What a kill leaves: a prune renamed its folder (half deleted), a save its temporary folder.
  fs::create_directories(dir + "/step_00000002.pruning");
  fs::create_directories(dir + "/step_00000005.tmp");
  EXPECT_EQ(m.list().size(), 2u);
  EXPECT_EQ(m.clean_leftovers(), 2);
  EXPECT_FALSE(fs::exists(dir + "/step_00000002.pruning"));
  EXPECT_FALSE(fs::exists(dir + "/step_00000005.tmp"));
  EXPECT_EQ(m.clean_leftovers(), 0);
}

TEST(Reliability, ResumeFallsBackToTheNewestValidCheckpointAndKeepsIt) {
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.val_shards = "";
  c.train.steps = 9;
  c.train.keep_last = 2;
  const std::string root = testing::scratch_dir("fallback");
  ASSERT_TRUE(run_training(trainer_options(c, root + "/full")).ok());

  TrainerOptions first = trainer_options(c, root + "/split");
  first.stop_after_step = 7;  // checkpoints 3 and 6
  ASSERT_TRUE(run_training(first).ok());
  const std::string ckdir = root + "/split/checkpoints";
  const std::string newest = ckdir + "/step_00000006";
  fs::resize_file(newest + "/model.safetensors", fs::file_size(newest + "/model.safetensors") / 2);
  fs::create_directories(ckdir + "/step_00000003.pruning");  // and a prune's leftover, cleaned on start

  TrainerOptions second = trainer_options(c, root + "/split");
  second.resume = true;
  second.config.train.keep_last = 1;  // the prune after step 4's checkpoint keeps step 4, not the damaged step 6
  second.config.train.ckpt_every = 1;
  second.stop_after_step = 4;
  auto r = run_training(second);
  ASSERT_TRUE(r.ok()) << r.status().to_string();  // before: the damaged step 6 blocked --resume
  EXPECT_EQ(r->start_step, 3);
  CheckpointManager m(ckdir, 1);
  auto kept = m.list();
  ASSERT_EQ(kept.size(), 1u) << "the valid checkpoints were pruned in favour of the damaged one";
  EXPECT_EQ(kept[0].step, 4);
  EXPECT_TRUE(m.verify(kept[0]).ok());
  EXPECT_TRUE(fs::exists(ckdir + "/step_00000006.damaged/model.safetensors")) << "the damaged one is kept aside";
  EXPECT_FALSE(fs::exists(ckdir + "/step_00000003.pruning"));
  EXPECT_FALSE(fs::exists(newest));

  second.stop_after_step = -1;
  auto rest = run_training(second);
  ASSERT_TRUE(rest.ok()) << rest.status().to_string();
  EXPECT_EQ(rest->start_step, 4);
  EXPECT_EQ(rest->final_step, 9);
  const auto a = train_losses(root + "/full", /*must_exist=*/false);
  const auto b = train_losses(root + "/split", /*must_exist=*/false);
  ASSERT_EQ(a.size(), 9u);
  ASSERT_EQ(b.size(), 9u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;
  auto list = CheckpointManager(ckdir, 1).list();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].step, 9);

  // Every checkpoint damaged: an error naming each, not a silent restart from step 0.
  fs::resize_file(list[0].path + "/optimizer.safetensors", 10);
  auto none = run_training(second);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("every checkpoint"), std::string::npos) << none.status().message();
  EXPECT_NE(none.status().message().find("optimizer.safetensors"), std::string::npos) << none.status().message();
}

}  // namespace
}  // namespace vlm
