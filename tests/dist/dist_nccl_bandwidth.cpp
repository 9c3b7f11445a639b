// The NCCL communicator's all_gather and reduce_scatter bandwidth on this launch's GPUs (a world of one alone;
// several ranks under vlm launch, mpirun or srun), beside its peer in the same run: a device-to-device cudaMemcpy
// of the same bytes on the same GPU (what a world of one's collectives amount to), with the ratio.
//   dist_nccl_bandwidth [MiB=64] [iterations=20]
// Prints, on rank 0, one line per collective and dtype: time per call, algorithm bandwidth (the gathered / scattered
// buffer's bytes over the time) and bus bandwidth (algbw * (n - 1) / n, nccl-tests' convention).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dist/communicator.h"

namespace {

using vlm::DType;
using vlm::Tensor;
using vlm::dist::Communicator;

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds a call of `run` takes, averaged over `iterations` after 3 warm-up calls; `run` returns false on error.
template <class Run>
double time_calls(int iterations, Communicator& comm, Run run) {
  for (int i = 0; i < 3; ++i)
    if (!run()) std::exit(1);
  if (!comm.barrier().ok()) std::exit(1);
  cudaDeviceSynchronize();
  const double start = seconds_now();
  for (int i = 0; i < iterations; ++i)
    if (!run()) std::exit(1);
  cudaDeviceSynchronize();
  return (seconds_now() - start) / iterations;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t mib = argc > 1 ? std::atoll(argv[1]) : 64;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 20;
  const vlm::Expected<vlm::dist::LaunchInfo> info = vlm::dist::launch_info_from_env();
  if (!info.ok()) {
    std::fprintf(stderr, "%s\n", info.status().message().c_str());
    return 1;
  }
  vlm::Expected<std::unique_ptr<Communicator>> made = vlm::dist::make_communicator(*info, vlm::Device::cuda());
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().message().c_str());
    return 1;
  }
  Communicator& comm = **made;
  const int n = comm.size();
  const bool print = comm.rank() == 0;
  if (print) std::printf("NCCL on %d rank(s), %lld MiB buffers, %d calls each\n", n, static_cast<long long>(mib),
                         iterations);
  for (DType dt : {DType::bf16, DType::f32}) {
    const int64_t full_elems = mib * (int64_t{1} << 20) / static_cast<int64_t>(vlm::dtype_size(dt));
    const int64_t shard = full_elems / n;
    Tensor full = Tensor::zeros({shard * n}, dt, comm.device());
    Tensor part = Tensor::zeros({shard}, dt, comm.device());
    const double bytes = static_cast<double>(full.nbytes());
    auto report = [&](const char* what, double s) {
      const double algbw = bytes / s / 1e9;
      if (print)
        std::printf("  %-15s %-4s %8.3f ms  algbw %7.1f GB/s  busbw %7.1f GB/s\n", what, vlm::dtype_name(dt), s * 1e3,
                    algbw, algbw * (n - 1) / n);
      return algbw;
    };
    const double ag = report("all_gather", time_calls(iterations, comm, [&] {
                               vlm::Status s = comm.all_gather(full, part);
                               if (!s.ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
                               return s.ok();
                             }));
    const double rs = report("reduce_scatter", time_calls(iterations, comm, [&] {
                               vlm::Status s = comm.reduce_scatter(part, full, vlm::dist::ReduceOp::sum);
                               if (!s.ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
                               return s.ok();
                             }));
    Tensor copy = Tensor::zeros({shard * n}, dt, comm.device());
    const double peer = report("cudaMemcpy D2D", time_calls(iterations, comm, [&] {
                                 return cudaMemcpyAsync(copy.raw_data(), full.raw_data(), full.nbytes(),
                                                        cudaMemcpyDeviceToDevice, nullptr) == cudaSuccess;
                               }));
    if (print)
      std::printf("  %s ratio to the copy's bandwidth: all_gather %.2f, reduce_scatter %.2f\n", vlm::dtype_name(dt),
                  ag / peer, rs / peer);
  }
  return 0;
}
