// The trainer's batch pipeline on the CPU: the trainer (which fetches and uploads the next micro-batch while the
// current step runs) gives bit-identical losses to a plain loop that reads the loader and copies each batch
// synchronously, its metrics split data wait from compute, and the BatchUploader's CPU path and slot bookkeeping
// (misuse aborts naming the slot or field).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/philox.h"
#include "testing/test_util.h"
#include "track/metrics.h"
#include "train/device_batch.h"
#include "train/trainer.h"
#include "train_fixture.h"

namespace vlm {
namespace {

using testing::trainer_options;

std::string data_dir() {
  static const std::string dir = testing::scratch_dir("pipeline_data");
  return dir;
}

std::vector<MetricRecord> train_records(const std::string& run_dir) {
  auto records = read_jsonl_metrics(run_dir + "/metrics.jsonl");
  EXPECT_TRUE(records.ok());
  std::vector<MetricRecord> out;
  for (const auto& r : *records)
    if (r.kind == "train") out.push_back(r);
  return out;
}

TEST(TrainerPipeline, LossesEqualAPlainLoopWithSynchronousCopies) {
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.val_shards = "";
  c.train.steps = 3;
  c.train.ckpt_every = 0;
  for (int accum : {1, 3}) {  // one micro-batch per step, and several (the prefetch crosses step boundaries)
    c.train.grad_accum = accum;
    const std::string dir = testing::scratch_dir("pipeline_" + std::to_string(accum));
    auto r = run_training(trainer_options(c, dir));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const auto records = train_records(dir);
    const auto expected = testing::plain_loop_losses(c, Device::cpu());
    ASSERT_EQ(records.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      double loss = 0;
      ASSERT_TRUE(records[i].get("loss", &loss));
      EXPECT_EQ(loss, expected[i]) << "grad_accum " << accum << ", step " << i + 1;  // bit for bit
    }
  }
}

TEST(TrainerPipeline, ALoaderErrorStopsTheStepThatNeedsTheBatchNotTheOneReadingAhead) {
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.val_shards = "";
  c.data.epochs = 1;
  c.train.batch_size = 40;  // 160 samples: 4 batches, then the data is exhausted
  c.train.grad_accum = 1;
  c.train.steps = 6;
  c.train.ckpt_every = 2;
  const std::string dir = testing::scratch_dir("pipeline_exhausted");
  auto r = run_training(trainer_options(c, dir));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("exhausted"), std::string::npos) << r.status().message();
  // Step 4 read ahead into the end of the data, yet completed, logged and checkpointed like before.
  EXPECT_EQ(train_records(dir).size(), 4u);
  EXPECT_TRUE(std::filesystem::exists(dir + "/checkpoints/step_00000004/trainer_state.json"));
}

TEST(TrainerPipeline, MetricsSplitDataWaitFromCompute) {
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.val_shards = "";
  c.train.steps = 3;
  c.train.ckpt_every = 0;
  const std::string dir = testing::scratch_dir("pipeline_metrics");
  ASSERT_TRUE(run_training(trainer_options(c, dir)).ok());
  const auto records = train_records(dir);
  ASSERT_EQ(records.size(), 3u);
  for (const auto& r : records) {
    double wait = -1, wait_frac = -1, compute = -1, compute_frac = -1, upload = -1, device_wait = -1;
    ASSERT_TRUE(r.get("data_wait_s", &wait));
    ASSERT_TRUE(r.get("data_wait_frac", &wait_frac));
    ASSERT_TRUE(r.get("compute_s", &compute));
    ASSERT_TRUE(r.get("compute_frac", &compute_frac));
    ASSERT_TRUE(r.get("upload_s", &upload));
    ASSERT_TRUE(r.get("device_wait_s", &device_wait));
    EXPECT_GE(wait, 0);
    EXPECT_GT(compute, 0) << "every step runs a forward/backward and an optimizer step";
    EXPECT_GE(upload, 0);
    // Parts of one window's wall time: they cannot add up to more than all of it.
    EXPECT_GT(compute_frac, 0);
    EXPECT_LE(wait_frac + compute_frac, 1.0 + 1e-9);
    EXPECT_GE(device_wait, 0);
    EXPECT_LE(device_wait, compute) << "waiting for the device is part of the compute time";
  }
}

// A packed batch of random contents: n images of 3 x s x s, `t` tokens in two sequences, r loss rows.
PackedBatch random_batch(uint64_t seed, int n, int s, int t, int r) {
  Philox rng(seed);
  PackedBatch b;
  b.images = testing::random_normal({n, 3, s, s}, seed);
  auto ints = [&](size_t len, uint64_t bound) {
    std::vector<int32_t> v(len);
    for (auto& x : v) x = static_cast<int32_t>(rng.uniform_int(bound));
    return v;
  };
  b.tokens = ints(static_cast<size_t>(t), 1000);
  b.positions = ints(static_cast<size_t>(t), 64);
  b.cu_seqlens = {0, t / 2, t};
  b.image_rows = ints(static_cast<size_t>(n) * 4, static_cast<uint64_t>(t));
  b.loss_rows = ints(static_cast<size_t>(r), static_cast<uint64_t>(t));
  b.loss_targets = ints(static_cast<size_t>(r), 1000);
  b.max_seqlen = t - t / 2;
  b.n_samples = 2;
  return b;
}

void expect_tensor_is(const Tensor& t, const std::vector<int32_t>& v, const char* what) {
  ASSERT_TRUE(t.defined()) << what;
  ASSERT_EQ(t.dtype(), DType::i32) << what;
  ASSERT_EQ(t.numel(), static_cast<int64_t>(v.size())) << what;
  const Tensor h = t.to(Device::cpu());
  EXPECT_TRUE(std::equal(v.begin(), v.end(), h.data<int32_t>())) << what;
}

TEST(BatchUploader, CpuPathGivesTheBatchAsHostTensors) {
  BatchUploader up(Device::cpu());
  EXPECT_EQ(up.slots(), 2);
  for (uint64_t i = 0; i < 5; ++i) {
    const PackedBatch b = random_batch(i, 1 + static_cast<int>(i % 3), 8, 10 + 3 * static_cast<int>(i), 4);
    UploadedBatch u = up.upload(b);
    up.acquire(u);
    EXPECT_EQ(u.slot, static_cast<int>(i % 2));
    EXPECT_EQ(u.inputs.images.raw_data(), b.images.raw_data()) << "the CPU path shares the images";
    expect_tensor_is(u.inputs.tokens, b.tokens, "tokens");
    expect_tensor_is(u.inputs.positions, b.positions, "positions");
    expect_tensor_is(u.inputs.cu_seqlens, b.cu_seqlens, "cu_seqlens");
    expect_tensor_is(u.inputs.image_rows, b.image_rows, "image_rows");
    expect_tensor_is(u.inputs.loss_rows, b.loss_rows, "loss_rows");
    expect_tensor_is(u.inputs.loss_targets, b.loss_targets, "loss_targets");
    EXPECT_EQ(u.inputs.max_seqlen, b.max_seqlen);
    up.release(u);
  }
  EXPECT_EQ(up.pinned_bytes(), 0u);
  EXPECT_EQ(up.device_bytes(), 0u);
}

TEST(BatchUploaderDeath, MisuseAbortsNamingTheSlotOrField) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const PackedBatch b = random_batch(1, 2, 8, 12, 3);
  EXPECT_DEATH(
      {
        BatchUploader up(Device::cpu());
        up.upload(b);
        up.upload(b);
        up.upload(b);  // slot 0 again, never released
      },
      "slot 0 still holds upload 1, which was not released: at most 2 batches");
  EXPECT_DEATH(
      {
        BatchUploader up(Device::cpu());
        UploadedBatch u = up.upload(b);
        up.release(u);
        up.release(u);
      },
      "upload 1 is no longer in slot 0");
  EXPECT_DEATH(
      {
        BatchUploader up(Device::cpu());
        UploadedBatch u = up.upload(b);
        up.release(u);
        up.upload(b);
        up.upload(b);
        up.acquire(u);  // slot 0 now holds upload 3
      },
      "upload 1 is no longer in slot 0");
  EXPECT_DEATH(
      {
        BatchUploader up(Device::cpu());
        UploadedBatch u = up.upload(b);
        u.slot = 5;
        up.acquire(u);
      },
      "slot 5 is not one of the 2 slots");
  PackedBatch bad = b;
  bad.loss_targets.pop_back();
  EXPECT_DEATH(BatchUploader(Device::cpu()).upload(bad), "loss_targets has 2 entries for 3 loss_rows");
  bad = b;
  bad.positions.push_back(0);
  EXPECT_DEATH(BatchUploader(Device::cpu()).upload(bad), "positions has 13 entries for 12 tokens");
  bad = b;
  bad.cu_seqlens.clear();
  EXPECT_DEATH(BatchUploader(Device::cpu()).upload(bad), "cu_seqlens is empty");
  bad = b;
  bad.images = testing::random_normal({2, 3, 8, 8}, 1).to(DType::bf16);
  EXPECT_DEATH(BatchUploader(Device::cpu()).upload(bad), "images must be a contiguous f32");
  EXPECT_DEATH(BatchUploader(Device::cpu(), 0), "needs at least one slot");
}

}  // namespace
}  // namespace vlm
