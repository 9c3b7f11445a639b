// The batch pipeline on the GPU (label gpu; every test skips without a CUDA device):
//   * BatchUploader: a sequence of batches of varying sizes (slots grow) goes through upload/acquire/release while
//     the compute stream is kept busy, and a snapshot of every device tensor, taken on the compute stream after the
//     busy work, equals its host batch bit for bit. The ordering is what is tested: without the release wait, the
//     copy of batch i+1 would overwrite slot (i+1) % 2 while the compute stream still had batch i-1's snapshot
//     queued; without the acquire wait, the first (large) batch's snapshot would read its slot before the copy.
//   * The trainer on CUDA: fp32 losses equal a plain loop with synchronous copies bit for bit, and bf16 training
//     with train.recompute = "blocks" gives the same losses as without, bit for bit (deterministic kernels: fixed
//     reduction orders, no float atomics, cuBLASLt algorithms cached per shape; recomputation repeats the same
//     kernels on the same inputs).
//   * FSDP on one GPU: full_shard and shard_grad_op train no_shard's losses bit for bit, in fp32 and in bf16 (the
//     gathered bf16 shards are the same roundings of the same masters; one micro-batch a step keeps the sums' order).
//   * FSDP through NCCL (a world of one: rank 0 alone, as `vlm launch --nproc 1` runs it): the collectives keep their
//     order on NCCL's stream (fsdp_order.h) and full_shard in bf16 trains the world-of-one run's losses bit for bit
//     (NCCL's one-rank all_gather and reduce_scatter copy). Skips without NCCL.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include "kernels/ops.h"
#include "testing/test_util.h"
#include "train/device_batch.h"
#include "train/trainer.h"
#include "dist/communicator.h"
#include "fsdp_order.h"
#include "train_fixture.h"

namespace vlm {
namespace {

using testing::trainer_options;
using testing::train_losses;

#define SKIP_WITHOUT_CUDA() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

// Exact, batch-specific contents: integers (exact in f32), different for every (seed, index).
PackedBatch pattern_batch(uint64_t seed, int n, int side, int t, int r) {
  PackedBatch b;
  b.images = Tensor::empty({n, 3, side, side}, DType::f32);
  float* px = b.images.data<float>();
  for (int64_t i = 0; i < b.images.numel(); ++i)
    px[i] = static_cast<float>((static_cast<uint64_t>(i) * 2654435761u + seed * 97) % 1000003);
  auto ints = [&](size_t len, int32_t salt) {
    std::vector<int32_t> v(len);
    for (size_t i = 0; i < len; ++i) v[i] = static_cast<int32_t>((i * 7919 + seed * 31 + salt) % 100000);
    return v;
  };
  b.tokens = ints(static_cast<size_t>(t), 1);
  b.positions = ints(static_cast<size_t>(t), 2);
  b.cu_seqlens = {0, t / 2, t};
  b.image_rows = ints(static_cast<size_t>(n) * 4, 3);
  b.loss_rows = ints(static_cast<size_t>(r), 4);
  b.loss_targets = ints(static_cast<size_t>(r), 5);
  b.max_seqlen = t - t / 2;
  b.n_samples = 2;
  return b;
}

// Device copies of every input tensor, taken on the compute stream (clone() copies on the legacy default stream).
std::vector<Tensor> snapshot(const VlmInputs& in) {
  std::vector<Tensor> out;
  for (const Tensor* t :
       {&in.images, &in.tokens, &in.positions, &in.cu_seqlens, &in.image_rows, &in.loss_rows, &in.loss_targets})
    out.push_back(t->clone());
  return out;
}

void expect_equals_batch(const std::vector<Tensor>& snap, const PackedBatch& b, size_t index) {
  const Tensor images = snap[0].to(Device::cpu());
  ASSERT_EQ(images.shape(), b.images.shape()) << "batch " << index;
  EXPECT_EQ(std::memcmp(images.raw_data(), b.images.raw_data(), b.images.nbytes()), 0) << "batch " << index
                                                                                       << ": images";
  const std::vector<const std::vector<int32_t>*> host = {&b.tokens,     &b.positions, &b.cu_seqlens,
                                                         &b.image_rows, &b.loss_rows, &b.loss_targets};
  const char* names[] = {"tokens", "positions", "cu_seqlens", "image_rows", "loss_rows", "loss_targets"};
  for (size_t k = 0; k < host.size(); ++k) {
    const Tensor t = snap[k + 1].to(Device::cpu());
    ASSERT_EQ(t.dtype(), DType::i32);
    ASSERT_EQ(t.numel(), static_cast<int64_t>(host[k]->size())) << "batch " << index << ": " << names[k];
    EXPECT_TRUE(std::equal(host[k]->begin(), host[k]->end(), t.data<int32_t>()))
        << "batch " << index << ": " << names[k];
  }
}

TEST(BatchUploaderGpu, EveryUploadedTensorEqualsItsHostBatch) {
  SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  // Batch 0 is large (96 MiB of images: its copy takes milliseconds), the rest vary in size so the slots grow.
  std::vector<PackedBatch> batches;
  batches.push_back(pattern_batch(0, 32, 512, 300, 100));
  for (uint64_t i = 1; i < 16; ++i)
    batches.push_back(pattern_batch(i, 1 + static_cast<int>(i % 5), 64, 40 + static_cast<int>((i * 37) % 200),
                                    1 + static_cast<int>(i % 7) * 9));
  // Busy work for the compute stream: milliseconds of fp32 GEMMs (8 x 17 GFLOP) per step.
  Tensor a = testing::random_normal({2048, 2048}, 1).to(dev);
  Tensor y = Tensor::empty({2048, 2048}, DType::f32, dev);

  BatchUploader up(dev);
  std::vector<std::vector<Tensor>> snaps;
  UploadedBatch u = up.upload(batches[0]);
  for (size_t i = 0; i < batches.size(); ++i) {
    up.acquire(u);
    if (i > 0)  // batch 0: the snapshot follows the acquire directly, racing the large copy unless it waits
      for (int k = 0; k < 8; ++k) ops::linear_forward(y, a, a, Tensor());
    snaps.push_back(snapshot(u.inputs));
    up.release(u);
    if (i + 1 < batches.size()) u = up.upload(batches[i + 1]);  // refills the slot batch i-1's snapshot reads
  }
  ASSERT_TRUE(ops::check_index_errors(dev).ok());  // synchronizes the device
  for (size_t i = 0; i < batches.size(); ++i) expect_equals_batch(snaps[i], batches[i], i);
  EXPECT_GE(up.pinned_bytes(), batches[0].images.nbytes());
  EXPECT_GE(up.device_bytes(), batches[0].images.nbytes());
}

TEST(BatchUploaderGpu, BatchWithoutImagesAndReleaseWithoutAcquire) {
  SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  BatchUploader up(dev, 1);
  PackedBatch b = pattern_batch(3, 0, 16, 10, 4);
  UploadedBatch u = up.upload(b);
  up.release(u);  // never read: the slot's next copy is still ordered after this one
  b = pattern_batch(4, 0, 16, 12, 5);
  u = up.upload(b);
  up.acquire(u);
  const std::vector<Tensor> snap = snapshot(u.inputs);
  up.release(u);
  ASSERT_TRUE(ops::check_index_errors(dev).ok());
  EXPECT_EQ(snap[0].numel(), 0);
  expect_equals_batch(snap, b, 0);
}

std::string data_dir() {
  static const std::string dir = testing::scratch_dir("pipeline_gpu_data");
  return dir;
}

TEST(TrainerGpu, Fp32LossesEqualAPlainLoopWithSynchronousCopies) {
  SKIP_WITHOUT_CUDA();
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.val_shards = "";
  c.train.device = "cuda:0";
  c.train.deterministic = true;  // the same GEMM algorithms in both runs (no per-process autotuning)
  c.train.steps = 4;
  c.train.grad_accum = 3;
  c.train.ckpt_every = 0;
  const std::string dir = testing::scratch_dir("pipeline_gpu_fp32");
  auto r = run_training(trainer_options(c, dir));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto got = train_losses(dir), expected = testing::plain_loop_losses(c, Device::cuda(0));
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "step " << i + 1;
}

TEST(TrainerGpu, Bf16RecomputeBlocksGivesTheSameLosses) {
  SKIP_WITHOUT_CUDA();
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.val_shards = "";
  c.train.device = "cuda:0";
  c.train.precision = "bf16";
  c.train.deterministic = true;  // bit for bit needs the deterministic attention backward and fixed GEMM algorithms
  c.train.steps = 6;
  c.train.ckpt_every = 0;
  const std::string root = testing::scratch_dir("pipeline_gpu_recompute");
  ASSERT_TRUE(run_training(trainer_options(c, root + "/none")).ok());
  c.train.recompute = "blocks";
  auto r = run_training(trainer_options(c, root + "/blocks"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto a = train_losses(root + "/none"), b = train_losses(root + "/blocks");
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;  // bit for bit
  auto wa = read_file_bytes(root + "/none/checkpoints/step_00000006/model.safetensors");
  auto wb = read_file_bytes(root + "/blocks/checkpoints/step_00000006/model.safetensors");
  ASSERT_TRUE(wa.ok() && wb.ok());
  EXPECT_TRUE(*wa == *wb) << "final weights differ";
}

TEST(FsdpGpu, ShardedStrategiesEqualNoShardOnOneGpuInFp32AndBf16) {
  SKIP_WITHOUT_CUDA();
  for (const char* precision : {"fp32", "bf16"}) {
    RunConfig c = testing::tiny_run_config(data_dir());
    c.data.val_shards = "";
    c.train.device = "cuda:0";
    c.train.precision = precision;
    c.train.deterministic = true;
    c.train.steps = 6;
    c.train.grad_accum = 1;
    c.train.ckpt_every = 3;
    const std::string root = testing::scratch_dir(std::string("fsdp_gpu_") + precision);
    std::vector<double> base;
    for (const char* s : {"no_shard", "shard_grad_op", "full_shard"}) {
      c.train.fsdp = s;
      auto r = run_training(trainer_options(c, root + "/" + s));
      ASSERT_TRUE(r.ok()) << precision << " " << s << ": " << r.status().to_string();
      const std::vector<double> got = train_losses(root + "/" + s);
      ASSERT_EQ(got.size(), 6u) << s;
      if (base.empty()) base = got;
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], base[i]) << precision << " " << s << " step " << i + 1;
    }
  }
}

TEST(FsdpGpu, NcclWorldOfOneKeepsTheOrderAndTheLosses) {
  SKIP_WITHOUT_CUDA();
  Expected<std::unique_ptr<dist::Communicator>> nccl = dist::make_communicator(dist::LaunchInfo{}, Device::cuda(0));
  if (!nccl.ok()) GTEST_SKIP() << nccl.status().message();
  RunConfig c = testing::tiny_run_config(data_dir());
  c.data.val_shards = "";
  c.train.device = "cuda:0";
  c.train.precision = "bf16";
  c.train.deterministic = true;
  c.train.steps = 6;
  c.train.grad_accum = 1;
  c.train.ckpt_every = 3;
  c.train.fsdp = "full_shard";
  for (bool prefetch : {true, false}) {
    VlmModel model(c.model, Device::cuda(0), DType::bf16);
    model.init_weights(1);
    auto fsdp = Fsdp::create(model, **nccl, {FsdpStrategy::full_shard, prefetch, DType::bf16});
    ASSERT_TRUE(fsdp.ok()) << fsdp.status().to_string();
    EXPECT_EQ(testing::traced_micro_batches(c, **fsdp, 2, 0, 1), "") << "prefetch " << prefetch;
  }
  nccl->reset();
  // The trainer under a torchrun-style world of one: NCCL (with its TCP store), against the run without a launcher.
  const std::string root = testing::scratch_dir("fsdp_gpu_nccl");
  ASSERT_TRUE(run_training(trainer_options(c, root + "/local")).ok());
  const std::string port = std::to_string(20000 + getpid() % 20000);
  for (auto [k, v] : {std::pair{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"},
                      {"MASTER_ADDR", "127.0.0.1"}})
    setenv(k, v, 1);
  setenv("MASTER_PORT", port.c_str(), 1);
  auto r = run_training(trainer_options(c, root + "/nccl"));
  for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
    unsetenv(k);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(train_losses(root + "/nccl"), train_losses(root + "/local"));
}

}  // namespace
}  // namespace vlm
