// Data-parallel training's collectives (see data_parallel.h).
#include "train/data_parallel.h"

#include "core/logging.h"

namespace vlm {

Expected<DataParallel> DataParallel::open(Device device) {
  VLM_ASSIGN_OR_RETURN(dist::LaunchInfo info, dist::launch_info_from_env());
  std::unique_ptr<dist::Communicator> comm;
  if (device.is_cuda() && info.launcher != "none") {
    // GPU ranks: NCCL, also for a world of one under a launcher (vlm launch --nproc 1, RANK=0 WORLD_SIZE=1).
    VLM_ASSIGN_OR_RETURN(comm, dist::make_communicator(info, device));
  } else if (device.is_cuda()) {
    comm = dist::make_local_communicator(device);
  } else {
    VLM_ASSIGN_OR_RETURN(comm, dist::make_communicator(info));
  }
  if (info.distributed()) set_log_rank(info.rank);
  return DataParallel(std::move(comm), info.local_size);
}

Expected<int64_t> DataParallel::global_tokens(int64_t mine) {
  if (!distributed()) return mine;
  Expected<int64_t> total = dist::all_reduce_value(*comm_, mine, dist::ReduceOp::sum);
  if (!total.ok()) return total.status().with_context("data parallel: target tokens");
  return *total;
}

Expected<std::vector<std::string>> DataParallel::loader_states(const std::string& mine) {
  if (!distributed()) return std::vector<std::string>{mine};
  return dist::all_gather_strings(*comm_, mine);
}

Expected<uint64_t> DataParallel::check_replicas(const ParameterStore& params) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over every master weight's bytes, in parameter order
  for (const Param& p : params.all()) {
    const Tensor v = p.value.to(Device::cpu());
    const auto* bytes = static_cast<const unsigned char*>(v.raw_data());
    for (size_t i = 0; i < v.nbytes(); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  }
  if (!distributed()) return hash;
  Tensor mine = Tensor::empty({1}, DType::i64), all = Tensor::empty({size()}, DType::i64);
  mine.data<int64_t>()[0] = static_cast<int64_t>(hash);
  VLM_RETURN_IF_ERROR(comm_->all_gather(all, mine).with_context("data parallel: weight checksums"));
  std::string differ;
  for (int r = 1; r < size(); ++r)
    if (all.data<int64_t>()[r] != all.data<int64_t>()[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (!differ.empty())
    return internal_error(str("data parallel: the weights of rank(s) ", differ, " differ from rank 0's: the replicas "
                              "drifted apart (a rank computed a different update)"));
  return hash;
}

}  // namespace vlm
