// Data-parallel training under mpirun, for mpi_ddp_test.sh: the test fixture's tiny run (6 steps, a checkpoint every
// 3) on every rank of the launch, and the replica check catching a rank whose weights drifted.
//   ddp_driver prepare DATA                  writes the dataset and tokenizer once (before the ranks start)
//   ddp_driver run DATA RUN_DIR [STOP]       trains (stopping after step STOP as if interrupted, when given)
//   ddp_driver resume DATA RUN_DIR           continues RUN_DIR from its newest checkpoint
//   ddp_driver fail-last DATA RUN_DIR        as run, but the last rank's shards do not exist: its error must end
//                                            the job (the other ranks would wait in step 1's collectives forever)
//   ddp_driver replicas                      equal weights pass the replica check; one changed weight on the last
//                                            rank fails it on every rank
// Prints one line per rank ("rank r: ..."); exit status 1 when training returns an error (printed).
#include <cmath>
#include <cstdio>
#include <string>

#include "core/logging.h"
#include "dist/launch_env.h"
#include "train/data_parallel.h"
#include "train/trainer.h"
#include "train_fixture.h"

namespace {

int check_replicas() {
  vlm::Expected<vlm::DataParallel> dp = vlm::DataParallel::open(vlm::Device::cpu());
  if (!dp.ok()) {
    std::printf("error: %s\n", dp.status().message().c_str());
    return 1;
  }
  vlm::ParameterStore store;
  vlm::Param* w = store.add("w", vlm::ParamGroup::text, vlm::Shape{1000}, true, vlm::Device::cpu());
  for (int64_t i = 0; i < 1000; ++i) w->value.data<float>()[i] = static_cast<float>(i) * 0.5f;
  const vlm::Expected<uint64_t> same = dp->check_replicas(store);
  if (dp->rank() == dp->size() - 1) w->value.data<float>()[999] = std::nextafter(499.5f, 1e9f);  // one ulp
  const vlm::Expected<uint64_t> drifted = dp->check_replicas(store);
  const bool ok = same.ok() && (dp->size() == 1 ? drifted.ok() : !drifted.ok());
  std::printf("rank %d: replicas %s; drifted %s\n", dp->rank(), same.ok() ? "agree" : same.status().message().c_str(),
              drifted.ok() ? "not detected" : drifted.status().message().c_str());
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "replicas") return check_replicas();
  if (argc < 3 || (mode != "prepare" && argc < 4)) {
    std::fprintf(stderr, "usage: ddp_driver prepare DATA | run DATA RUN_DIR [STOP] | resume DATA RUN_DIR | replicas\n");
    return 2;
  }
  vlm::RunConfig config = vlm::testing::tiny_run_config(argv[2]);
  if (mode == "prepare") return 0;
  config.eval.every = 2;           // rank 0 evaluates at steps 2 and 4 while the others go on to the next step
  config.train.threads = 1;        // ranks share a small machine
  vlm::TrainerOptions o;
  o.config = config;
  o.run_dir = argv[3];
  o.quiet = true;
  o.resume = mode == "resume";
  if (mode == "run" && argc > 4) o.stop_after_step = std::stoll(argv[4]);
  if (mode == "fail-last") {
    const vlm::Expected<vlm::dist::LaunchInfo> info = vlm::dist::launch_info_from_env();
    if (info.ok() && info->rank == info->size - 1) o.config.data.train_shards += "/missing";
  }
  const vlm::Expected<vlm::TrainResult> r = vlm::run_training(o);
  if (!r.ok()) {
    std::printf("rank %d: error: %s\n", vlm::log_rank(), r.status().message().c_str());
    return 1;
  }
  std::printf("rank %d: step %lld loss %.17g\n", vlm::log_rank(), static_cast<long long>(r->final_step),
              r->final_loss);
  return 0;
}
