// Training from pretrained Hugging Face folders: a text-only Llama trains (loss falls) and generates in the final
// eval, a SigLIP tower and a Llama decoder combine into a VLM with a new projector (a frozen tower keeps the SigLIP
// weights exactly), and train.init_from is strict unless train.init_allow_missing names what may be missing.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/safetensors.h"
#include "model/hf_export.h"
#include "testing/test_util.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "train_fixture.h"

namespace vlm {
namespace {

using testing::trainer_options;
using testing::train_losses;

std::string data_dir() {
  static const std::string dir = testing::scratch_dir("train_data_pretrained");
  return dir;
}

// A Hugging Face folder of `parts` of the run's model shape, random weights of `seed`.
std::string export_folder(ModelConfig c, const std::string& parts, uint64_t seed, const std::string& name) {
  c.parts = parts;
  VlmModel m(c, Device::cpu());
  m.init_weights(seed);
  const std::string dir = testing::scratch_dir(name);
  EXPECT_TRUE(hf_export_model(m, dir, {}).ok());
  return dir;
}

TEST(TrainerPretrained, TextOnlyLlamaTrainsAndGenerates) {
  RunConfig c = testing::tiny_run_config(data_dir());
  c.train.init_from = export_folder(c.model, "text", 5, "pre_llama");
  c.train.steps = 40;
  c.train.ckpt_every = 0;
  c.train.grad_accum = 1;
  c.train.batch_size = 8;
  const std::string dir = testing::scratch_dir("pre_text_run");
  auto r = run_training(trainer_options(c, dir));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto l = train_losses(dir);
  ASSERT_EQ(l.size(), 40u);
  EXPECT_LT((l[37] + l[38] + l[39]) / 3, 0.7 * (l[0] + l[1] + l[2]) / 3);
  ASSERT_TRUE(r->has_eval);  // generation ran on the held-out prompts, without images
  ASSERT_TRUE(r->eval.vqa.has_value() || r->eval.caption.has_value());
  EXPECT_GT(r->eval.vqa ? r->eval.vqa->questions : r->eval.caption->captions, 0);
  // The checkpoint holds the decoder alone.
  auto latest = CheckpointManager(dir + "/checkpoints", 1).latest();
  ASSERT_TRUE(latest.has_value());
  auto w = safetensors_load(latest->path + "/model.safetensors");
  ASSERT_TRUE(w.ok());
  for (const auto& [name, t] : w->tensors) EXPECT_EQ(name.rfind("model.text_model.", 0) == 0 || name == "lm_head.weight", true) << name;
}

TEST(TrainerPretrained, SiglipAndLlamaCombineWithANewProjector) {
  RunConfig c = testing::tiny_run_config(data_dir());
  const std::string siglip = export_folder(c.model, "vision", 8, "pre_siglip");
  c.model.vision_from = siglip;
  c.model.text_from = export_folder(c.model, "text", 9, "pre_llama2");
  c.data.val_shards = "";
  c.train.freeze = {"vision"};
  c.train.steps = 3;
  c.train.ckpt_every = 0;
  const std::string dir = testing::scratch_dir("pre_combine_run");
  auto r = run_training(trainer_options(c, dir));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto latest = CheckpointManager(dir + "/checkpoints", 1).latest();
  ASSERT_TRUE(latest.has_value());
  auto trained = safetensors_load(latest->path + "/model.safetensors");
  auto tower = safetensors_load(siglip + "/model.safetensors");
  ASSERT_TRUE(trained.ok() && tower.ok());
  int compared = 0;
  for (const auto& [name, t] : tower->tensors) {  // SigLIP names: vision_model.*
    auto it = trained->tensors.find("model." + name);
    ASSERT_NE(it, trained->tensors.end()) << name;
    EXPECT_TRUE(testing::all_close(it->second, t, 0, 0)) << name;
    ++compared;
  }
  EXPECT_GT(compared, 5);
  EXPECT_TRUE(trained->tensors.count("model.connector.modality_projection.proj.weight"));
}

TEST(TrainerPretrained, InitFromIsStrictUnlessToldWhatMayBeMissing) {
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.val_shards = "";
  c.train.steps = 1;
  c.train.ckpt_every = 0;
  // A whole-VLM folder without its projector.
  ModelConfig vlm = c.model;
  VlmModel m(vlm, Device::cpu());
  m.init_weights(4);
  const std::string folder = testing::scratch_dir("pre_partial");
  HfExportOptions eo;
  eo.image_token_id = 3;
  ASSERT_TRUE(hf_export_model(m, folder, eo).ok());
  auto file = safetensors_load(folder + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  std::vector<std::pair<std::string, Tensor>> kept;
  for (const auto& [name, t] : file->tensors)
    if (name.find("connector") == std::string::npos) kept.emplace_back(name, t.clone());
  file = SafetensorsFile();
  ASSERT_TRUE(safetensors_save(folder + "/model.safetensors", kept).ok());
  c.train.init_from = folder;
  auto r = run_training(trainer_options(c, testing::scratch_dir("pre_strict_run")));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.connector.modality_projection.proj.weight"), std::string::npos)
      << r.status().to_string();
  c.train.init_allow_missing = {"projector"};
  r = run_training(trainer_options(c, testing::scratch_dir("pre_allowed_run")));
  EXPECT_TRUE(r.ok()) << r.status().to_string();
}

}  // namespace
}  // namespace vlm
