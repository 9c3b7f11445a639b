// The NCCL communicator with a world of one on one GPU: every collective and dtype, blocking and asynchronous,
// against the world-of-one CPU result bit for bit with guard regions around every output; ordering after the
// caller's stream; host tensors staged by the blocking forms (refused by the asynchronous ones); split; the
// rendezvous-store bootstrap of torchrun-style launches; and the watchdog that ends a process
// whose collective hangs. Every test skips without a CUDA device, an NCCL build, or a loadable NCCL.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/device.h"
#include "dist/communicator.h"
#include "dist/tcp_store.h"
#include "testing/test_util.h"

#ifdef VLM_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace vlm::dist {
namespace {

#ifdef VLM_HAVE_CUDA

constexpr int64_t kGuard = 256;  // elements of sentinel bytes on each side of every GPU output

std::unique_ptr<Communicator> nccl_or_skip_reason(std::string& reason) {
  if (!cuda_available()) {
    reason = "no CUDA device";
    return nullptr;
  }
  if (!built_with_nccl()) {
    reason = "built without NCCL";
    return nullptr;
  }
  Expected<std::unique_ptr<Communicator>> comm = make_communicator(LaunchInfo{}, Device::cuda(0));
  if (!comm.ok()) {
    reason = comm.status().message();
    return nullptr;
  }
  return std::move(*comm);
}

#define NCCL_OR_SKIP(comm)                                   \
  std::string skip_reason;                                   \
  std::unique_ptr<Communicator> comm = nccl_or_skip_reason(skip_reason); \
  if (!comm) GTEST_SKIP() << skip_reason

// A GPU output of n elements inside a buffer with kGuard sentinel elements (bytes 0xA5) before and after.
struct Guarded {
  Tensor whole, inner;
  Guarded(int64_t n, DType dt) {
    whole = Tensor::empty({n + 2 * kGuard}, dt, Device::cuda(0));
    cudaMemset(whole.raw_data(), 0xA5, whole.nbytes());
    inner = whole.slice(0, kGuard, kGuard + n);
  }
  // Empty when the guards are intact, else which side was written.
  std::string check_guards() const {
    const Tensor host = whole.to(Device::cpu());
    const auto* bytes = static_cast<const unsigned char*>(host.raw_data());
    const size_t guard_bytes = static_cast<size_t>(kGuard) * dtype_size(whole.dtype());
    for (size_t i = 0; i < guard_bytes; ++i) {
      if (bytes[i] != 0xA5) return "the guard before the output was written";
      if (bytes[host.nbytes() - 1 - i] != 0xA5) return "the guard after the output was written";
    }
    return "";
  }
};

// Values of dtype dt that differ element to element and between calls (`salt`), exact in every dtype.
Tensor pattern(int64_t n, DType dt, int salt) {
  const bool floating = dt == DType::f32 || dt == DType::bf16 || dt == DType::f64;
  return testing::filled({n}, dt, [&](int64_t i) {
    if (dt == DType::u8) return static_cast<double>((i * 7 + salt * 13) % 251);
    const double v = static_cast<double>((i * 7 + salt * 13) % 61) - 30.0;  // negatives too
    return floating && i % 2 == 1 ? v + 0.5 : v;
  });
}

// The first differing byte of two same-size tensors (any devices), or empty.
std::string first_difference(const Tensor& got, const Tensor& want) {
  const Tensor g = got.to(Device::cpu()), w = want.to(Device::cpu());
  if (g.nbytes() != w.nbytes()) return str("sizes ", g.nbytes(), " and ", w.nbytes(), " bytes");
  const auto* a = static_cast<const unsigned char*>(g.raw_data());
  const auto* b = static_cast<const unsigned char*>(w.raw_data());
  for (size_t i = 0; i < g.nbytes(); ++i)
    if (a[i] != b[i]) {
      const int64_t e = static_cast<int64_t>(i / dtype_size(g.dtype()));
      return str("element ", e, ": ", g.item_f32(e), " vs the CPU's ", w.item_f32(e));
    }
  return "";
}

TEST(NcclCommunicator, EveryCollectiveAndDtypeMatchesTheCpu) {
  NCCL_OR_SKIP(comm);
  EXPECT_STREQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->device(), Device::cuda(0));
  const std::unique_ptr<Communicator> cpu = make_local_communicator();
  cudaStream_t producer = nullptr, consumer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i32, DType::i64, DType::u8}) {
    const bool reduces = dt != DType::u8;
    for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{(4 << 20) + 3}}) {
      for (bool async : {false, true}) {
        SCOPED_TRACE(str(dtype_name(dt), " [", n, "] ", async ? "async" : "blocking"));
        // Inputs are uploaded on `producer`, the collective ordered after it, the result read on `consumer`.
        auto upload = [&](const Tensor& host) {
          Tensor t = Tensor::empty(host.shape(), host.dtype(), Device::cuda(0));
          t.copy_from(host, async ? producer : nullptr);
          return t;
        };
        auto run = [&](Expected<WorkHandle> work) {
          ASSERT_TRUE(work.ok()) << work.status().message();
          if (async) {
            ASSERT_TRUE((*work)->wait_on(consumer).ok());
            ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
          } else {
            ASSERT_TRUE((*work)->wait().ok());
          }
        };
        StreamHandle after = async ? producer : nullptr;
        // Setup on the legacy stream (memsets, copies) is finished before a collective ordered only after `producer`.
        auto settle = [] { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); };
        const Tensor in = pattern(n, dt, 1);
        // all_gather and gather
        {
          Guarded out(n, dt);
          Tensor want = Tensor::zeros({n}, dt);
          ASSERT_TRUE(cpu->all_gather(want, in).ok());
          settle();
          run(comm->all_gather_async(out.inner, upload(in), after));
          EXPECT_EQ(first_difference(out.inner, want), "") << "all_gather";
          EXPECT_EQ(out.check_guards(), "") << "all_gather";
          Guarded gathered(n, dt);
          settle();
          run(comm->gather_async(gathered.inner, upload(in), 0, after));
          EXPECT_EQ(first_difference(gathered.inner, want), "") << "gather";
          EXPECT_EQ(gathered.check_guards(), "") << "gather";
        }
        // broadcast
        {
          Guarded t(n, dt);
          t.inner.copy_from(in);
          settle();
          run(comm->broadcast_async(t.inner, 0, after));
          EXPECT_EQ(first_difference(t.inner, in), "") << "broadcast";
          EXPECT_EQ(t.check_guards(), "") << "broadcast";
        }
        if (!reduces) continue;
        const bool floating = dt == DType::f32 || dt == DType::bf16 || dt == DType::f64;
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::avg}) {
          if (op == ReduceOp::avg && !floating) continue;
          SCOPED_TRACE(reduce_op_name(op));
          Tensor want = in.clone();
          ASSERT_TRUE(cpu->all_reduce(want, op).ok());
          Guarded t(n, dt);
          t.inner.copy_from(in);
          settle();
          run(comm->all_reduce_async(t.inner, op, after));
          EXPECT_EQ(first_difference(t.inner, want), "") << "all_reduce";
          EXPECT_EQ(t.check_guards(), "") << "all_reduce";
          Guarded out(n, dt);
          Tensor want_rs = Tensor::zeros({n}, dt);
          ASSERT_TRUE(cpu->reduce_scatter(want_rs, in, op).ok());
          settle();
          run(comm->reduce_scatter_async(out.inner, upload(in), op, after));
          EXPECT_EQ(first_difference(out.inner, want_rs), "") << "reduce_scatter";
          EXPECT_EQ(out.check_guards(), "") << "reduce_scatter";
        }
      }
    }
  }
  EXPECT_TRUE(comm->barrier().ok());
  cudaStreamDestroy(producer);
  cudaStreamDestroy(consumer);
}

void CUDART_CB sleep_ms(void* ms) { std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(ms))); }

TEST(NcclCommunicator, ACollectiveStartsAfterTheStreamThatWroteItsInput) {
  NCCL_OR_SKIP(comm);
  cudaStream_t producer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  const int64_t n = 1 << 22;
  Tensor in = Tensor::zeros({n}, DType::f32, Device::cuda(0));
  Tensor out = Tensor::zeros({n}, DType::f32, Device::cuda(0));
  const Tensor fresh = testing::filled({n}, DType::f32, [](int64_t i) { return static_cast<double>(i % 1000 + 1); });
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the zeros are written before the producer's copy
  // The producer writes `in` only after 300 ms; a collective not ordered after it would gather the zeros.
  static int delay = 300;
  ASSERT_EQ(cudaLaunchHostFunc(producer, sleep_ms, &delay), cudaSuccess);
  in.copy_from(fresh, producer);
  Expected<WorkHandle> work = comm->all_gather_async(out, in, producer);
  ASSERT_TRUE(work.ok()) << work.status().message();
  EXPECT_FALSE((*work)->is_done());
  ASSERT_TRUE((*work)->wait().ok());
  EXPECT_TRUE((*work)->is_done());
  EXPECT_EQ(first_difference(out, fresh), "");
  cudaStreamDestroy(producer);
}

TEST(NcclCommunicator, StagesHostTensorsInTheBlockingFormsOnlyAndSplits) {
  NCCL_OR_SKIP(comm);
  // The blocking forms take a run's host values through a device copy; the asynchronous ones refuse them.
  Tensor host = testing::filled({4}, DType::f32, [](int64_t i) { return 1.0 + static_cast<double>(i); });
  ASSERT_TRUE(comm->all_reduce(host, ReduceOp::sum).ok());
  EXPECT_EQ(host.data<float>()[3], 4.f);
  Tensor gathered = Tensor::zeros({4}, DType::f32);
  ASSERT_TRUE(comm->all_gather(gathered, host).ok());
  EXPECT_EQ(gathered.data<float>()[2], 3.f);
  Expected<std::vector<std::string>> strings = all_gather_strings(*comm, "loader state");
  ASSERT_TRUE(strings.ok()) << strings.status().message();
  EXPECT_EQ(*strings, std::vector<std::string>{"loader state"});
  Expected<int64_t> tokens = all_reduce_value(*comm, int64_t{1234567890123}, ReduceOp::sum);
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(*tokens, 1234567890123);
  EXPECT_TRUE(comm->barrier().ok());
  const Expected<WorkHandle> refused = comm->all_reduce_async(host, ReduceOp::sum);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("is not on cuda:0"), std::string::npos) << refused.status().message();
  // A sub-communicator (hybrid_shard's groups): its own world of one, on the same GPU, beside the parent.
  Expected<std::unique_ptr<Communicator>> sub = comm->split(0, 0);
  ASSERT_TRUE(sub.ok()) << sub.status().message();
  EXPECT_EQ((*sub)->size(), 1);
  EXPECT_EQ((*sub)->rank(), 0);
  EXPECT_STREQ((*sub)->backend(), "nccl");
  EXPECT_NE((*sub)->stream(), comm->stream());
  Tensor dev = host.to(Device::cuda(0));
  ASSERT_TRUE((*sub)->all_reduce(dev, ReduceOp::sum).ok());
  ASSERT_TRUE(comm->all_reduce(dev, ReduceOp::sum).ok());
  EXPECT_EQ(dev.to(Device::cpu()).data<float>()[0], 1.f);
}

TEST(NcclCommunicator, BootstrapsThroughTheRendezvousStoreOfATorchrunStyleLaunch) {
  std::string skip_reason;
  if (!nccl_or_skip_reason(skip_reason)) GTEST_SKIP() << skip_reason;
  int port = 0;
  {
    Expected<std::unique_ptr<TcpStoreServer>> probe = TcpStoreServer::start(0);
    ASSERT_TRUE(probe.ok());
    port = (*probe)->port();
  }
  const std::string port_text = std::to_string(port);
  const std::map<std::string, std::string> vars = {
      {"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"},
      {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port_text}};
  const Expected<LaunchInfo> info = launch_info_from_env([&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->launcher, "torchrun");
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", port_text.c_str(), 1);
  Expected<std::unique_ptr<Communicator>> comm = make_communicator(*info, Device::cuda(0));
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
  ASSERT_TRUE(comm.ok()) << comm.status().message();
  Tensor t = Tensor::full({3}, 2.5f, Device::cuda(0));
  ASSERT_TRUE((*comm)->all_reduce(t, ReduceOp::sum).ok());
  EXPECT_EQ(t.to(Device::cpu()).item_f32(2), 2.5f);
  // A CPU communicator for the same launch is refused with the reason (CPU runs of several ranks use MPI).
  LaunchInfo several = *info;
  several.size = 2;
  EXPECT_FALSE(make_communicator(several).ok());
}

TEST(NcclCommunicatorDeathTest, TheWatchdogEndsAProcessWhoseCollectiveHangs) {
  std::string skip_reason;
  if (!nccl_or_skip_reason(skip_reason)) GTEST_SKIP() << skip_reason;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("VLM_DIST_TIMEOUT_S", "1", 1);
        std::string reason;
        std::unique_ptr<Communicator> comm = nccl_or_skip_reason(reason);
        if (!comm) std::_Exit(2);
        cudaStream_t stuck = nullptr;
        cudaStreamCreateWithFlags(&stuck, cudaStreamNonBlocking);
        static int forever = 60000;  // the collective waits behind this for a minute
        cudaLaunchHostFunc(stuck, sleep_ms, &forever);
        Tensor in = Tensor::zeros({1001}, DType::f32, Device::cuda(0));
        Tensor out = Tensor::zeros({1001}, DType::f32, Device::cuda(0));
        Expected<WorkHandle> work = comm->all_gather_async(out, in, stuck);
        if (!work.ok()) std::_Exit(3);
        const Status s = (*work)->wait();  // returns the timeout's error; the watchdog then ends the process
        std::fprintf(stderr, "wait: %s\n", s.message().c_str());
        std::this_thread::sleep_for(std::chrono::seconds(30));
        std::_Exit(4);
      },
      ::testing::ExitedWithCode(75),
      "rank 0: fatal: all_gather of 1001 f32 elements \\(nccl, 1 ranks\\) did not complete within 1 s");
}

#else

TEST(NcclCommunicator, NeedsACudaBuild) {
  EXPECT_FALSE(built_with_nccl());
  const Expected<std::unique_ptr<Communicator>> comm = make_communicator(LaunchInfo{}, Device::cuda(0));
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("built without CUDA"), std::string::npos);
}

#endif

}  // namespace
}  // namespace vlm::dist
