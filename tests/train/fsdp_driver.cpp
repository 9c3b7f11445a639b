// FSDP training under mpirun, for fsdp_test.sh: the test fixture's tiny model trained by every rank of the launch
// with a train.fsdp strategy, and the losses one process computes for the same samples.
//   fsdp_driver prepare DATA                          writes the dataset and tokenizer once (before the ranks start)
//   fsdp_driver train DATA RUN_DIR STRATEGY STEPS ACCUM [stop=N] [resume] [reduce=bf16] [ckpt=N] [freeze=PART] [tied]
//                                                     [recompute] [group=G (hybrid_shard's shard group size)]
//                                                     [gather=fp8 (fp8 E4M3 weight all-gathers)]
//   fsdp_driver reference DATA WORLD STEPS ACCUM      prints "step loss" for every step: one process reading the
//                                                     WORLD ranks' shares (rank order) and summing the ranks'
//                                                     gradients in rank order, as the collectives do
//   fsdp_driver reshard DATA SRC_CHECKPOINT DST_RUN_DIR STRATEGY   loads a checkpoint (any layout and world size) onto
//   this
//                                                     launch's ranks under STRATEGY and saves it again
//   fsdp_driver order DATA STRATEGY [noprefetch|group=G|gather=fp8]  two micro-batches of this rank's share through FSDP with the
//                                                     schedule's trace on; prints "rank r: order ok" when the
//                                                     collectives kept their order (fsdp_order.h)
//   fsdp_driver dump CHECKPOINT                       one line per full tensor (weights, moments): name and an
//                                                     FNV-1a hash of its bytes, then the optimizer step
// train prints "rank r: step S loss L" at the end; exit status 1 on an error (printed).
#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/logging.h"
#include "dist/launch_env.h"
#include "kernels/ops.h"
#include "train/data_parallel.h"
#include "train/device_batch.h"
#include "train/optimizer.h"
#include "train/sharded_checkpoint.h"
#include "train/trainer.h"
#include "fsdp_order.h"
#include "train_fixture.h"

namespace {

vlm::RunConfig base_config(const std::string& data, int64_t steps, int accum) {
  vlm::RunConfig c = vlm::testing::tiny_run_config(data);
  c.data.val_shards.clear();  // no eval: the losses are what is compared
  c.train.steps = steps;
  c.train.grad_accum = accum;
  c.train.ckpt_every = 0;
  c.train.threads = 1;  // ranks share a small machine
  c.train.warmup_steps = 2;
  return c;
}

int reference(const std::string& data, int world, int64_t steps, int accum) {
  vlm::RunConfig c = base_config(data, steps, accum);
  auto tokenizer = vlm::Tokenizer::load(c.data.tokenizer);
  if (!tokenizer.ok()) return 1;
  std::vector<std::unique_ptr<vlm::VlmBatchLoader>> loaders;
  for (int r = 0; r < world; ++r) {
    auto opts = vlm::make_data_options(c, c.data.train_shards, false);
    if (!opts.ok()) return 1;
    opts->rank = r;
    opts->world = world;
    auto loader = vlm::VlmBatchLoader::open(*opts, *tokenizer);
    if (!loader.ok()) {
      std::printf("error: %s\n", loader.status().message().c_str());
      return 1;
    }
    loaders.push_back(std::move(*loader));
  }
  omp_set_num_threads(1);  // as the trainer with train.threads = 1
  openblas_set_num_threads(1);
  vlm::VlmModel model(c.model, vlm::Device::cpu());
  model.init_weights(static_cast<uint64_t>(c.train.seed));
  vlm::AdamW opt(model.params(), c.train.adamw);
  std::vector<vlm::Tensor> sum;
  for (auto& p : model.params().all()) sum.push_back(vlm::Tensor::zeros(p.grad.shape(), vlm::DType::f32));
  for (int64_t step = 1; step <= steps; ++step) {
    std::vector<std::vector<vlm::PackedBatch>> batches(static_cast<size_t>(world));
    int64_t tokens = 0;
    for (int r = 0; r < world; ++r)
      for (int m = 0; m < accum; ++m) {
        auto b = loaders[static_cast<size_t>(r)]->next_batch(c.train.batch_size);
        if (!b.ok()) return 1;
        tokens += static_cast<int64_t>(b->loss_rows.size());
        batches[static_cast<size_t>(r)].push_back(std::move(*b));
      }
    double loss = 0;
    for (int r = 0; r < world; ++r) {
      model.params().zero_grads();
      double rank_loss = 0;
      for (const auto& b : batches[static_cast<size_t>(r)])
        if (b.n_samples > 0)
          rank_loss += model.forward_backward(vlm::to_model_inputs(b, vlm::Device::cpu()), 1.f / tokens).loss_sum();
      loss += rank_loss;
      size_t i = 0;
      for (auto& p : model.params().all()) {
        float* acc = sum[i++].data<float>();
        const float* g = p.grad.data<float>();
        for (int64_t k = 0; k < p.grad.numel(); ++k) acc[k] = r == 0 ? g[k] : acc[k] + g[k];
      }
    }
    size_t i = 0;
    for (auto& p : model.params().all()) p.grad.copy_from(sum[i++]);
    opt.step(vlm::lr_at_step(step, c.train.steps, c.train.warmup_steps, c.train.adamw.lr, c.train.min_lr_ratio));
    std::printf("%lld %.17g\n", static_cast<long long>(step), loss / static_cast<double>(tokens));
  }
  return 0;
}

int fail(const vlm::Status& s) {
  std::printf("rank %d: error: %s\n", vlm::log_rank(), s.message().c_str());
  return 1;
}

int reshard(const std::string& data, const std::string& src, const std::string& dst, const std::string& strategy_name) {
  vlm::Expected<vlm::DataParallel> dp = vlm::DataParallel::open(vlm::Device::cpu());
  if (!dp.ok()) return fail(dp.status());
  auto strategy = vlm::parse_fsdp_strategy(strategy_name);
  if (!strategy.ok()) return fail(strategy.status());
  vlm::RunConfig c = base_config(data, 1, 1);
  vlm::VlmModel model(c.model, vlm::Device::cpu());
  auto fsdp = vlm::Fsdp::create(model, dp->comm(), {*strategy, true, vlm::DType::f32});
  if (!fsdp.ok()) return fail(fsdp.status());
  vlm::AdamW opt((*fsdp)->optimizer_params(), c.train.adamw);
  if (vlm::Status s = vlm::load_model_and_optimizer(src, **fsdp, opt); !s.ok()) return fail(s);
  vlm::CheckpointManager ckpt(dst + "/checkpoints", 3);
  const vlm::Status s =
      vlm::save_checkpoint_all_ranks(ckpt, opt.steps_taken(), **fsdp, opt, [&](const std::string& dir) {
        auto bytes = vlm::read_file_bytes(src + "/trainer_state.json");
        if (!bytes.ok()) return bytes.status();
        return vlm::write_file_atomic(dir + "/trainer_state.json", bytes->data(), bytes->size());
      });
  if (!s.ok()) return fail(s);
  std::printf("rank %d: resharded onto %d rank(s), %s\n", dp->rank(), dp->size(), strategy_name.c_str());
  return 0;
}

int order(const std::string& data, const std::string& strategy_name, const std::string& option) {
  vlm::Expected<vlm::DataParallel> dp = vlm::DataParallel::open(vlm::Device::cpu());
  if (!dp.ok()) return fail(dp.status());
  auto strategy = vlm::parse_fsdp_strategy(strategy_name);
  if (!strategy.ok()) return fail(strategy.status());
  vlm::RunConfig c = base_config(data, 1, 2);
  omp_set_num_threads(1);
  openblas_set_num_threads(1);
  vlm::VlmModel model(c.model, vlm::Device::cpu());
  model.init_weights(static_cast<uint64_t>(c.train.seed));
  vlm::FsdpOptions options{*strategy, option != "noprefetch", vlm::DType::f32};
  if (option.rfind("group=", 0) == 0) options.shard_group_size = std::stoi(option.substr(6));
  options.gather_fp8 = option == "gather=fp8";
  auto fsdp = vlm::Fsdp::create(model, dp->comm(), options);
  if (!fsdp.ok()) return fail(fsdp.status());
  const std::string e = vlm::testing::traced_micro_batches(c, **fsdp, 2, dp->rank(), dp->size());
  if (!e.empty()) return fail(vlm::internal_error("order: " + e));
  std::printf("rank %d: order ok (%s, %zu events)\n", dp->rank(), strategy_name.c_str(),
              (*fsdp)->collectives().events().size());
  return 0;
}

int dump(const std::string& dir) {
  auto ckpt = vlm::CheckpointTensors::open(dir);
  if (!ckpt.ok()) return fail(ckpt.status());
  std::vector<std::string> names = ckpt->names();
  std::sort(names.begin(), names.end());  // the layouts list them in different orders
  for (const std::string& name : names)
    for (const char* suffix : {"", ".exp_avg", ".exp_avg_sq"}) {
      vlm::Tensor t = vlm::Tensor::empty({ckpt->shape(name)->numel()}, vlm::DType::f32);
      if (vlm::Status s = ckpt->read(name, suffix, 0, t); !s.ok()) return fail(s);
      uint64_t h = 1469598103934665603ull;
      const auto* b = static_cast<const unsigned char*>(t.raw_data());
      for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ b[i]) * 1099511628211ull;
      std::printf("%s%s %016llx\n", name.c_str(), suffix, static_cast<unsigned long long>(h));
    }
  std::printf("optimizer_step %lld\n", static_cast<long long>(ckpt->optimizer_step()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "prepare" && argc > 2) {
    vlm::testing::tiny_run_config(argv[2]);
    return 0;
  }
  if (mode == "reshard" && argc > 5) return reshard(argv[2], argv[3], argv[4], argv[5]);
  if (mode == "dump" && argc > 2) return dump(argv[2]);
  if (mode == "order" && argc > 3) return order(argv[2], argv[3], argc > 4 ? argv[4] : "");
  if (mode == "reference" && argc > 5)
    return reference(argv[2], std::stoi(argv[3]), std::stoll(argv[4]), std::stoi(argv[5]));
  if (mode != "train" || argc < 7) {
    std::fprintf(stderr,
                 "usage: fsdp_driver prepare DATA | train DATA RUN_DIR STRATEGY STEPS ACCUM [options] | "
                 "reference DATA WORLD STEPS ACCUM\n");
    return 2;
  }
  vlm::TrainerOptions o;
  o.config = base_config(argv[2], std::stoll(argv[5]), std::stoi(argv[6]));
  o.config.train.fsdp = argv[4];
  o.run_dir = argv[3];
  o.quiet = true;
  for (int i = 7; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("stop=", 0) == 0) o.stop_after_step = std::stoll(a.substr(5));
    if (a == "resume") o.resume = true;
    if (a == "reduce=bf16") o.config.train.fsdp_reduce_dtype = "bf16";
    if (a.rfind("ckpt=", 0) == 0) o.config.train.ckpt_every = std::stoll(a.substr(5));
    if (a.rfind("freeze=", 0) == 0) o.config.train.freeze.push_back(a.substr(7));
    if (a == "recompute") o.config.train.recompute = "blocks";
    if (a == "tied") o.config.model.text.tie_embeddings = true;  // the LM head shares the embeddings' unit
    if (a.rfind("group=", 0) == 0) o.config.train.fsdp_shard_group_size = std::stoi(a.substr(6));
    if (a == "gather=fp8") o.config.train.fsdp_allgather_dtype = "fp8_e4m3";
  }
  if (const char* pid_dir = std::getenv("FSDP_TEST_PID_DIR")) {  // the kill test finds each rank's process here
    const vlm::Expected<vlm::dist::LaunchInfo> info = vlm::dist::launch_info_from_env();
    const std::string pid = std::to_string(getpid());
    (void)vlm::write_file_atomic(std::string(pid_dir) + "/rank" + std::to_string(info.ok() ? info->rank : 0),
                                 pid.data(), pid.size());
  }
  vlm::OptionSet options;  // the resolved config.toml, so that vlm convert can read the run
  vlm::add_run_options(options, o.config);
  o.resolved_toml = options.to_toml();
  const vlm::Expected<vlm::TrainResult> r = vlm::run_training(o);
  if (!r.ok()) {
    std::printf("rank %d: error: %s\n", vlm::log_rank(), r.status().message().c_str());
    return 1;
  }
  std::printf("rank %d: step %lld loss %.17g\n", vlm::log_rank(), static_cast<long long>(r->final_step), r->final_loss);
  return 0;
}
