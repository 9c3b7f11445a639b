// FSDP in one process (a world of one; the multi-rank tests are fsdp_test.py under mpirun):
//   * the strategies train the same losses as no_shard, bit for bit (one micro-batch a step: the same sums in the
//     same order), and a sharded checkpoint resumes under another strategy bit for bit;
//   * the collectives keep their order (fsdp_order.h) under every strategy, with and without prefetch, and the
//     order check fails on a schedule that does not prefetch or overlap;
//   * strategy names, and malformed sharded checkpoint indexes, are clear errors naming the file and the field.
// On CUDA: test_device_batch_gpu.cpp (FsdpGpu).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "core/safetensors.h"
#include "dist/collective_schedule.h"
#include "fsdp_order.h"
#include "testing/test_util.h"
#include "train/data_parallel.h"
#include "train/fsdp.h"
#include "train/sharded_checkpoint.h"
#include "train/trainer.h"
#include "train_fixture.h"

namespace vlm {
namespace {

using testing::trainer_options;
using testing::train_losses;

RunConfig config(const std::string& device) {
  static const std::string data = testing::scratch_dir("fsdp_data");
  RunConfig c = testing::tiny_run_config(data);
  c.data.val_shards = "";
  c.train.device = device;
  c.train.deterministic = true;
  c.train.steps = 6;
  c.train.grad_accum = 1;
  c.train.ckpt_every = 3;
  return c;
}

void expect_strategies_equal(RunConfig c, const std::string& name) {
  const std::string root = testing::scratch_dir(name);
  std::vector<double> base;
  for (const char* s : {"no_shard", "shard_grad_op", "full_shard"}) {
    c.train.fsdp = s;
    auto r = run_training(trainer_options(c, root + "/" + s));
    ASSERT_TRUE(r.ok()) << s << ": " << r.status().to_string();
    const std::vector<double> got = train_losses(root + "/" + s);
    ASSERT_EQ(got.size(), 6u) << s;
    if (base.empty()) base = got;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], base[i]) << s << " step " << i + 1;
  }
}

TEST(Fsdp, WorldOfOneStrategiesTrainTheSameLosses) { expect_strategies_equal(config("cpu"), "fsdp_world1"); }

TEST(Fsdp, ShardedCheckpointResumesUnderAnotherStrategy) {
  RunConfig c = config("cpu");
  const std::string root = testing::scratch_dir("fsdp_resume");
  c.train.fsdp = "full_shard";
  ASSERT_TRUE(run_training(trainer_options(c, root + "/full")).ok());
  TrainerOptions o = trainer_options(c, root + "/switched");
  o.stop_after_step = 3;
  ASSERT_TRUE(run_training(o).ok());
  EXPECT_TRUE(std::filesystem::exists(root + "/switched/checkpoints/step_00000003/" + kFsdpIndexFile));
  c.train.fsdp = "no_shard";
  o = trainer_options(c, root + "/switched");
  o.resume = true;
  auto r = run_training(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(train_losses(root + "/switched"), train_losses(root + "/full"));
  // The no_shard run's final checkpoint is in the replicated layout, and holds the same tensors.
  auto ckpt = CheckpointTensors::open(root + "/switched/checkpoints/step_00000006");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_FALSE(ckpt->sharded());
  EXPECT_EQ(ckpt->optimizer_step(), 6);
}

TEST(Fsdp, CollectivesKeepTheirOrder) {
  RunConfig c = config("cpu");
  c.train.threads = 1;
  for (const char* name : {"no_shard", "shard_grad_op", "full_shard"}) {
    for (bool prefetch : {true, false}) {
      VlmModel model(c.model, Device::cpu());
      model.init_weights(1);
      std::unique_ptr<dist::Communicator> comm = dist::make_local_communicator();
      auto fsdp = Fsdp::create(model, *comm, {*parse_fsdp_strategy(name), prefetch, DType::f32});
      ASSERT_TRUE(fsdp.ok()) << fsdp.status().to_string();
      EXPECT_EQ(testing::traced_micro_batches(c, **fsdp, 2, 0, 1), "") << name << " prefetch " << prefetch;
      const auto& events = (*fsdp)->collectives().events();
      if (!prefetch && (*fsdp)->sharded()) {
        // The check can fail: a schedule without prefetch or overlap is not what it demands of one with them.
        const std::string e = testing::check_fsdp_order(events, **fsdp, true);
        EXPECT_TRUE(e.find("no prefetch") != std::string::npos || e.find("joined before the next") != std::string::npos)
            << e;
      }
      // And it catches a reduction issued twice or a use before the gather's join.
      std::vector<dist::ScheduleEvent> broken = events;
      for (size_t i = 0; i < broken.size(); ++i)
        if (broken[i].type == dist::ScheduleEvent::Type::issued && broken[i].tag == "reduce") {
          broken.insert(broken.begin() + static_cast<std::ptrdiff_t>(i), broken[i]);
          break;
        }
      EXPECT_NE(testing::check_fsdp_order(broken, **fsdp, prefetch).find("reduction(s) in a micro-batch"),
                std::string::npos);
      if ((*fsdp)->sharded()) {
        broken = events;
        for (size_t i = 0; i < broken.size(); ++i)
          if (broken[i].type == dist::ScheduleEvent::Type::joined && broken[i].tag == "gather") {
            std::swap(broken[i], broken[i + 1]);  // the join moves after the use that follows it
            break;
          }
        EXPECT_NE(testing::check_fsdp_order(broken, **fsdp, prefetch), "");
      }
    }
  }
}

TEST(Fsdp, HybridAndFp8GathersRunInAWorldOfOne) {
  // A world of one: hybrid_shard with groups of one is full_shard (the same losses bit for bit); fp8 gathers change
  // the weights the compute sees (so the losses differ a little) and keep the order.
  RunConfig c = config("cpu");
  const std::string root = testing::scratch_dir("fsdp_hybrid_fp8");
  c.train.fsdp = "full_shard";
  ASSERT_TRUE(run_training(trainer_options(c, root + "/full")).ok());
  c.train.fsdp = "hybrid_shard";
  c.train.fsdp_shard_group_size = 1;
  auto r = run_training(trainer_options(c, root + "/hybrid"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(train_losses(root + "/hybrid"), train_losses(root + "/full"));
  c.train.fsdp = "full_shard";
  c.train.fsdp_allgather_dtype = "fp8_e4m3";
  r = run_training(trainer_options(c, root + "/fp8"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const std::vector<double> fp8 = train_losses(root + "/fp8"), full = train_losses(root + "/full");
  ASSERT_EQ(fp8.size(), full.size());
  EXPECT_NE(fp8, full);
  for (size_t i = 0; i < fp8.size(); ++i) EXPECT_NEAR(fp8[i], full[i], 2e-2 * full[i]) << "step " << i + 1;

  VlmModel model(c.model, Device::cpu());
  model.init_weights(1);
  std::unique_ptr<dist::Communicator> comm = dist::make_local_communicator();
  FsdpOptions o{FsdpStrategy::full_shard, true, DType::f32};
  o.gather_fp8 = true;
  auto fsdp = Fsdp::create(model, *comm, o);
  ASSERT_TRUE(fsdp.ok());
  EXPECT_EQ(testing::traced_micro_batches(c, **fsdp, 2, 0, 1), "");
  o.strategy = FsdpStrategy::hybrid_shard;
  o.shard_group_size = 2;
  VlmModel other(c.model, Device::cpu());
  const auto bad = Fsdp::create(other, *comm, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("divides the world size 1"), std::string::npos) << bad.status().message();
}

TEST(DataParallel, GpuRanksGetNcclUnderALauncherAndLocalCopiesWithout) {
  // Without a launcher a GPU run is a world of one whose communicator takes the GPU's tensors.
  Expected<DataParallel> alone = DataParallel::open(Device::cuda(0));
  ASSERT_TRUE(alone.ok()) << alone.status().to_string();
  EXPECT_STREQ(alone->comm().backend(), "local");
  EXPECT_EQ(alone->device(), Device::cuda(0));
  if (dist::built_with_nccl()) GTEST_SKIP() << "the NCCL world of one runs in FsdpGpu (test_train_gpu)";
  // Under a launcher GPU ranks go to NCCL (no longer refused as "CPU only"): a build without CUDA says what it lacks.
  for (auto [k, v] : {std::pair{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}) setenv(k, v, 1);
  Expected<DataParallel> ranks = DataParallel::open(Device::cuda(0));
  for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK"}) unsetenv(k);
  ASSERT_FALSE(ranks.ok());
  EXPECT_NE(ranks.status().message().find("NCCL backend, which CUDA builds have"), std::string::npos)
      << ranks.status().message();
}

TEST(Fsdp, StrategyNamesAndBadIndexesAreClearErrors) {
  EXPECT_EQ(*parse_fsdp_strategy("full_shard"), FsdpStrategy::full_shard);
  const Expected<FsdpStrategy> bad = parse_fsdp_strategy("zero3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("no_shard, shard_grad_op, full_shard, hybrid_shard"), std::string::npos);

  const std::string dir = testing::scratch_dir("fsdp_bad_index");
  auto write = [&](const std::string& text) {
    ASSERT_TRUE(write_file_atomic(dir + "/" + kFsdpIndexFile, text.data(), text.size()).ok());
  };
  auto error_of = [&]() {
    Expected<CheckpointTensors> t = CheckpointTensors::open(dir);
    return t.ok() ? std::string() : t.status().message();
  };
  write("{not json");
  EXPECT_NE(error_of().find("not a sharded checkpoint index"), std::string::npos) << error_of();
  write(
      R"({"world_size": 2, "params": [{"name": "w", "shape": [4], "pieces": [{"rank": 0, "begin": 0, "numel": 2}]}]})");
  EXPECT_NE(error_of().find("w: pieces hold 2 of 4 elements"), std::string::npos) << error_of();
  write(
      R"({"world_size": 2, "params": [{"name": "w", "shape": [4], "pieces": [{"rank": 5, "begin": 0, "numel": 4}]}]})");
  EXPECT_NE(error_of().find("do not tile"), std::string::npos) << error_of();
  write(R"({"world_size": 2, "params": [{"name": "w", "shape": "four", "pieces": []}]})");
  EXPECT_NE(error_of().find(kFsdpIndexFile), std::string::npos) << error_of();
  // A valid index whose shard file is missing: the read names the file.
  write(
      R"({"world_size": 1, "params": [{"name": "w", "shape": [4], "pieces": [{"rank": 0, "begin": 0, "numel": 4}]}]})");
  Expected<CheckpointTensors> t = CheckpointTensors::open(dir);
  ASSERT_TRUE(t.ok());
  Tensor out = Tensor::empty({4}, DType::f32);
  const Status s = t->read("w", "", 0, out);
  EXPECT_NE(s.message().find("model_shard_00000.safetensors"), std::string::npos) << s.message();
  EXPECT_NE(t->read("absent", "", 0, out).message().find("no parameter absent"), std::string::npos);
}

}  // namespace
}  // namespace vlm
