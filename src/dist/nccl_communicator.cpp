// The NCCL backend of Communicator for CUDA tensors (see communicator.h); built in CUDA builds only.
// NCCL itself is loaded with dlopen on first use (VLM_NCCL_LIB, else libnccl.so.2 from the loader's path), so vlm
// starts, and runs everything else, on machines without it. Each collective waits for the caller's `after` stream
// through an event, runs on the communicator's own high-priority non-blocking stream, and records a `done` event
// that wait() polls (with the timeout) and wait_on() makes another stream wait for. A watchdog thread checks every
// collective in flight and ncclCommGetAsyncError every 100 ms; a collective past VLM_DIST_TIMEOUT_S or an
// asynchronous NCCL error aborts the NCCL communicator and ends the process with status 75, naming the rank, the
// collective, its size and the time waited (the host may be stuck in a synchronization no wait() will leave).
#include "dist/communicator.h"

#ifdef VLM_DIST_NCCL
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>

#include "core/env.h"
#include "core/logging.h"
#include "dist/tcp_store.h"
#endif

namespace vlm::dist {

// mpi_communicator.cpp.
Expected<std::unique_ptr<Communicator>> make_mpi_communicator(const LaunchInfo& info);

#ifdef VLM_DIST_NCCL

namespace {

constexpr int kWatchdogExit = 75;

// The NCCL entry points vlm uses, resolved from the loaded library.
struct NcclApi {
  decltype(&ncclGetVersion) get_version;
  decltype(&ncclGetUniqueId) get_unique_id;
  decltype(&ncclCommInitRank) comm_init_rank;
  decltype(&ncclCommDestroy) comm_destroy;
  decltype(&ncclCommAbort) comm_abort;
  decltype(&ncclCommGetAsyncError) comm_get_async_error;
  decltype(&ncclGetErrorString) get_error_string;
  decltype(&ncclGetLastError) get_last_error;
  decltype(&ncclAllReduce) all_reduce;
  decltype(&ncclAllGather) all_gather;
  decltype(&ncclReduceScatter) reduce_scatter;
  decltype(&ncclBroadcast) broadcast;
  decltype(&ncclSend) send;
  decltype(&ncclRecv) recv;
  decltype(&ncclGroupStart) group_start;
  decltype(&ncclGroupEnd) group_end;
  decltype(&ncclCommCount) comm_count;
  decltype(&ncclCommUserRank) comm_user_rank;
  // ncclCommSplit (2.18 and later); null in older libraries, where split() is an error.
  decltype(&ncclCommSplit) comm_split = nullptr;
};

Expected<const NcclApi*> load_nccl() {
  static std::mutex mu;
  static NcclApi api;
  static Status failure;
  static bool tried = false;
  std::lock_guard<std::mutex> lock(mu);
  if (tried) return failure.ok() ? Expected<const NcclApi*>(&api) : Expected<const NcclApi*>(failure);
  tried = true;
  const std::string path = env::text("VLM_NCCL_LIB").empty() ? "libnccl.so.2" : env::text("VLM_NCCL_LIB");
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    failure = unsupported(str("cannot load NCCL (", path, "): ", dlerror(),
                              "; install NCCL 2.10 or later, or point VLM_NCCL_LIB at a libnccl.so.2 (PyTorch ships "
                              "one in site-packages/nvidia/nccl/lib)"));
    return failure;
  }
  bool all = true;
  std::string missing;
  auto resolve = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (fn == nullptr) {
      all = false;
      missing += str(" ", name);
    }
  };
  resolve(api.get_version, "ncclGetVersion");
  resolve(api.get_unique_id, "ncclGetUniqueId");
  resolve(api.comm_init_rank, "ncclCommInitRank");
  resolve(api.comm_destroy, "ncclCommDestroy");
  resolve(api.comm_abort, "ncclCommAbort");
  resolve(api.comm_get_async_error, "ncclCommGetAsyncError");
  resolve(api.get_error_string, "ncclGetErrorString");
  resolve(api.all_reduce, "ncclAllReduce");
  resolve(api.all_gather, "ncclAllGather");
  resolve(api.reduce_scatter, "ncclReduceScatter");
  resolve(api.broadcast, "ncclBroadcast");
  resolve(api.send, "ncclSend");
  resolve(api.recv, "ncclRecv");
  resolve(api.group_start, "ncclGroupStart");
  resolve(api.group_end, "ncclGroupEnd");
  resolve(api.comm_count, "ncclCommCount");
  resolve(api.comm_user_rank, "ncclCommUserRank");
  api.comm_split = reinterpret_cast<decltype(api.comm_split)>(dlsym(lib, "ncclCommSplit"));
  // ncclGetLastError (2.13) only adds detail to messages.
  api.get_last_error = reinterpret_cast<decltype(api.get_last_error)>(dlsym(lib, "ncclGetLastError"));
  if (api.get_last_error == nullptr) api.get_last_error = [](ncclComm_t) { return ""; };
  if (!all) {
    failure = unsupported(str("NCCL at ", path, " lacks", missing, ": it is older than 2.10"));
    return failure;
  }
  int version = 0;
  api.get_version(&version);
  if (version < 21000) {
    failure = unsupported(str("NCCL at ", path, " is version ", version, "; vlm needs 2.10 or later (bf16, avg)"));
    return failure;
  }
  return &api;
}

Status cuda_status(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return Status();
  return internal_error(str(what, " failed: ", cudaGetErrorName(rc), ": ", cudaGetErrorString(rc)));
}

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::u8: return ncclUint8;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    default: return ncclNumTypes;  // excluded by Communicator's checks
  }
}

// A world of one averages with ncclSum (the same values): NCCL before 2.29.7 leaves the last count % 32 elements of
// a one-rank ncclAvg unwritten (fixed in NCCL 2.29.7), which the H100 run of test_dist_nccl caught in an out-of-place
// reduce_scatter of 4194307 elements.
ncclRedOp_t nccl_op(ReduceOp op, int world) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return world == 1 ? ncclSum : ncclAvg;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}

using Clock = std::chrono::steady_clock;

// A collective in flight as the watchdog sees it: its done event (owned here), what it is, when it was issued.
struct Inflight {
  cudaEvent_t done = nullptr;
  std::string what;
  Clock::time_point start = Clock::now();
  ~Inflight() {
    if (done != nullptr) cudaEventDestroy(done);
  }
};

// What a communicator shares with its Works and its watchdog thread.
struct NcclShared {
  const NcclApi* api = nullptr;
  ncclComm_t comm = nullptr;
  int rank = 0, size = 1, device = 0, timeout_s = 600;
  std::mutex mu;
  std::condition_variable wake;
  bool stopping = false;
  std::list<std::shared_ptr<Inflight>> inflight;

  // The asynchronous error NCCL reports for the communicator, if any (ncclInProgress is not one).
  Status async_error() {
    ncclResult_t err = ncclSuccess;
    const ncclResult_t rc = api->comm_get_async_error(comm, &err);
    if (rc != ncclSuccess) err = rc;
    if (err == ncclSuccess || err == ncclInProgress) return Status();
    return internal_error(str("rank ", rank, ": NCCL reported an asynchronous error: ", api->get_error_string(err),
                              " (", api->get_last_error(comm), ")"));
  }

  // Aborts NCCL (its kernels stop waiting for peers) and ends the process. The abort runs on a thread of its own and
  // gets 10 s: an abort that itself hangs (a device blocked behind the hung work) must not keep the process alive.
  [[noreturn]] void end_process(const std::string& message) {
    std::fprintf(stderr, "[vlm] rank %d: fatal: %s; aborting NCCL and ending this process\n", rank, message.c_str());
    std::fflush(nullptr);
    static std::atomic<bool> aborted{false};
    std::thread([api = api, comm = comm] {
      api->comm_abort(comm);
      aborted = true;
    }).detach();
    const Clock::time_point start = Clock::now();
    while (!aborted && std::chrono::duration<double>(Clock::now() - start).count() < 10.0)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::_Exit(kWatchdogExit);
  }

  void watchdog() {
    cudaSetDevice(device);
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      wake.wait_for(lock, std::chrono::milliseconds(100));
      if (stopping) break;
      for (auto it = inflight.begin(); it != inflight.end();) {
        const cudaError_t q = cudaEventQuery((*it)->done);
        if (q == cudaSuccess) {
          it = inflight.erase(it);
          continue;
        }
        const double waited = std::chrono::duration<double>(Clock::now() - (*it)->start).count();
        if (q != cudaErrorNotReady)
          end_process(str((*it)->what, " failed: ", cudaGetErrorName(q), ": ", cudaGetErrorString(q)));
        if (waited > timeout_s)
          end_process(str((*it)->what, " did not complete within ", timeout_s, " s (waited ",
                          static_cast<int>(waited), " s; VLM_DIST_TIMEOUT_S): a rank died, hangs, or did not call it"));
        ++it;
      }
      const Status err = async_error();
      if (!err.ok()) end_process(err.message());
    }
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclShared> shared, std::shared_ptr<Inflight> inflight, std::vector<Tensor> keep)
      : shared_(std::move(shared)), inflight_(std::move(inflight)), keep_(std::move(keep)) {}
  ~NcclWork() override {
    if (!settled_) (void)wait();  // the tensors this Work holds may be in use on the communication stream
  }

  bool is_done() override {
    if (finished_) return true;
    const cudaError_t q = cudaEventQuery(inflight_->done);
    if (q == cudaErrorNotReady) return false;
    finish(q == cudaSuccess ? Status() : cuda_status(q, inflight_->what.c_str()));
    return true;
  }

  Status wait() override {
    for (int polls = 0; !is_done(); ++polls) {
      const double waited = std::chrono::duration<double>(Clock::now() - inflight_->start).count();
      if (waited > shared_->timeout_s) {
        finish(internal_error(str("rank ", shared_->rank, ": ", inflight_->what, " did not complete within ",
                                  shared_->timeout_s,
                                  " s (VLM_DIST_TIMEOUT_S): a rank died, hangs, or did not call it")));
        break;
      }
      if (polls % 64 == 63) {
        const Status err = shared_->async_error();
        if (!err.ok()) {
          finish(err);
          break;
        }
      }
      if (polls > 200) std::this_thread::sleep_for(std::chrono::microseconds(polls < 5000 ? 20 : 200));
    }
    return status_;
  }

  Status wait_on(StreamHandle stream) override {
    if (finished_) return status_;
    const Status s =
        cuda_status(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), inflight_->done, 0), "cudaStreamWaitEvent");
    if (s.ok()) settled_ = true;  // work on `stream` is ordered after the collective
    return s;
  }

 private:
  void finish(Status status) {
    finished_ = settled_ = true;
    status_ = std::move(status);
    keep_.clear();
  }

  std::shared_ptr<NcclShared> shared_;
  std::shared_ptr<Inflight> inflight_;
  std::vector<Tensor> keep_;
  bool finished_ = false, settled_ = false;
  Status status_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclShared> shared, std::unique_ptr<Communicator> bootstrap)
      : shared_(std::move(shared)), bootstrap_(std::move(bootstrap)) {
    int lo = 0, hi = 0;
    cudaDeviceGetStreamPriorityRange(&lo, &hi);
    VLM_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, hi) == cudaSuccess,
              "cannot create NCCL's communication stream");
    VLM_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming) == cudaSuccess, "cudaEventCreate");
    watchdog_ = std::thread([s = shared_] { s->watchdog(); });
  }
  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->stopping = true;
    }
    shared_->wake.notify_all();
    watchdog_.join();
    cudaStreamSynchronize(stream_);
    shared_->api->comm_destroy(shared_->comm);
    cudaEventDestroy(ready_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return shared_->rank; }
  int size() const override { return shared_->size; }
  const char* backend() const override { return "nccl"; }
  Device device() const override { return Device::cuda(shared_->device); }
  StreamHandle stream() const override { return stream_; }

  // A host rendezvous: a staged one-element all_reduce on this communicator's stream (not after the compute stream).
  Status barrier() override {
    Tensor one = Tensor::zeros({1}, DType::f32);
    return all_reduce(one, ReduceOp::sum);
  }

  // ncclCommSplit with the parent's config (NCCL_SPLIT_NOCOLOR is not used: every rank joins a group). The new
  // communicator has its own stream and watchdog; its abort ends the process as the parent's does.
  Expected<std::unique_ptr<Communicator>> split(int color, int key) override {
    if (color < 0) return invalid_argument(str("split: color ", color, " is negative"));
    if (api()->comm_split == nullptr)
      return unsupported("split: this NCCL has no ncclCommSplit (2.18 or later needed for hybrid_shard)");
    VLM_RETURN_IF_ERROR(cuda_status(cudaSetDevice(shared_->device), "cudaSetDevice"));
    // The parent's collectives in flight finish first (the split is itself a collective on the parent).
    VLM_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
    auto sub = std::make_shared<NcclShared>();
    sub->api = shared_->api;
    sub->device = shared_->device;
    sub->timeout_s = shared_->timeout_s;
    ncclResult_t rc = api()->comm_split(comm(), color, key, &sub->comm, nullptr);
    if (rc != ncclSuccess)
      return internal_error(str("rank ", rank(), ": ncclCommSplit (color ", color, "): ", api()->get_error_string(rc),
                                " (", api()->get_last_error(comm()), ")"));
    int r = 0, n = 0;
    api()->comm_user_rank(sub->comm, &r);
    api()->comm_count(sub->comm, &n);
    sub->rank = r;
    sub->size = n;
    return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(std::move(sub), nullptr));
  }

  void abort(int code) override {
    std::fflush(nullptr);
    shared_->api->comm_abort(shared_->comm);
    if (bootstrap_) bootstrap_->abort(code);  // MPI_Abort ends every rank
    std::_Exit(code);                         // the launcher (vlm launch, torchrun) ends the others
  }

 protected:
  Expected<WorkHandle> do_all_reduce(Tensor& t, ReduceOp op, StreamHandle after) override {
    return issue("all_reduce", reduce_op_name(op), t, t.numel(), after, {t}, [&] {
      return api()->all_reduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                               nccl_op(op, size()), comm(), stream_);
    });
  }
  Expected<WorkHandle> do_all_gather(Tensor& out, const Tensor& in, StreamHandle after) override {
    return issue("all_gather", nullptr, in, in.numel(), after, {out, in}, [&] {
      return api()->all_gather(in.raw_data(), out.raw_data(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()),
                               comm(), stream_);
    });
  }
  Expected<WorkHandle> do_reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op, StreamHandle after) override {
    return issue("reduce_scatter", reduce_op_name(op), out, out.numel(), after, {out, in}, [&] {
      return api()->reduce_scatter(in.raw_data(), out.raw_data(), static_cast<size_t>(out.numel()),
                                   nccl_type(in.dtype()), nccl_op(op, size()), comm(), stream_);
    });
  }
  Expected<WorkHandle> do_broadcast(Tensor& t, int root, StreamHandle after) override {
    return issue("broadcast", nullptr, t, t.numel(), after, {t}, [&] {
      return api()->broadcast(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), root,
                              comm(), stream_);
    });
  }
  // NCCL has no gather: root receives from every rank (itself included) and every rank sends, in one group.
  Expected<WorkHandle> do_gather(Tensor& out, const Tensor& in, int root, StreamHandle after) override {
    std::vector<Tensor> keep = {in};
    if (rank() == root) keep.push_back(out);
    return issue("gather", nullptr, in, in.numel(), after, std::move(keep), [&] {
      const size_t n = static_cast<size_t>(in.numel());
      const ncclDataType_t type = nccl_type(in.dtype());
      ncclResult_t rc = api()->group_start();
      if (rc != ncclSuccess) return rc;
      if (rank() == root) {
        auto* bytes = static_cast<char*>(out.raw_data());
        for (int q = 0; q < size() && rc == ncclSuccess; ++q)
          rc = api()->recv(bytes + static_cast<size_t>(q) * in.nbytes(), n, type, q, comm(), stream_);
      }
      if (rc == ncclSuccess) rc = api()->send(in.raw_data(), n, type, root, comm(), stream_);
      const ncclResult_t end = api()->group_end();
      return rc != ncclSuccess ? rc : end;
    });
  }

 private:
  const NcclApi* api() const { return shared_->api; }
  ncclComm_t comm() const { return shared_->comm; }

  template <class Launch>
  Expected<WorkHandle> issue(const char* collective, const char* op, const Tensor& t, int64_t count,
                             StreamHandle after, std::vector<Tensor> keep, Launch launch) {
    VLM_RETURN_IF_ERROR(cuda_status(cudaSetDevice(shared_->device), "cudaSetDevice"));
    auto inflight = std::make_shared<Inflight>();
    inflight->what = str(collective, op ? str(" (", op, ")") : std::string(), " of ", count, " ",
                         dtype_name(t.dtype()), " elements (nccl, ", size(), " ranks)");
    VLM_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(&inflight->done, cudaEventDisableTiming),
                                    "cudaEventCreate"));
    VLM_RETURN_IF_ERROR(cuda_status(cudaEventRecord(ready_, static_cast<cudaStream_t>(after)), "cudaEventRecord"));
    VLM_RETURN_IF_ERROR(cuda_status(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent"));
    const ncclResult_t rc = launch();
    if (rc != ncclSuccess)
      return internal_error(str("rank ", rank(), ": ", inflight->what, ": ", api()->get_error_string(rc), " (",
                                api()->get_last_error(comm()), ")"));
    VLM_RETURN_IF_ERROR(cuda_status(cudaEventRecord(inflight->done, stream_), "cudaEventRecord"));
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      shared_->inflight.push_back(inflight);
    }
    return WorkHandle(std::make_unique<NcclWork>(shared_, std::move(inflight), std::move(keep)));
  }

  std::shared_ptr<NcclShared> shared_;
  std::unique_ptr<Communicator> bootstrap_;  // MPI under mpirun / srun (abort through it), else null
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  std::thread watchdog_;
};

Status nccl_call(const NcclApi* api, ncclResult_t rc, const char* what) {
  if (rc == ncclSuccess) return Status();
  return internal_error(str(what, " failed: ", api->get_error_string(rc), " (", api->get_last_error(nullptr), ")"));
}

}  // namespace

bool built_with_nccl() { return true; }

Expected<std::unique_ptr<Communicator>> make_nccl_communicator(const LaunchInfo& info, Device device) {
  int count = 0;
  VLM_RETURN_IF_ERROR(cuda_status(cudaGetDeviceCount(&count), "cudaGetDeviceCount"));
  const int gpu = info.distributed() || info.launcher != "none" ? info.local_rank : device.index;
  if (gpu != device.index && device.index != 0)
    return invalid_argument(str("rank ", info.rank, " was asked for ", device.to_string(), " but LOCAL_RANK is ",
                                info.local_rank, ": each rank uses GPU LOCAL_RANK (pass cuda)"));
  if (gpu >= count)
    return invalid_argument(str("rank ", info.rank, ": LOCAL_RANK ", gpu, " needs GPU ", gpu, " but ", count,
                                " are visible (CUDA_VISIBLE_DEVICES?): start at most one rank a GPU on each node"));
  VLM_RETURN_IF_ERROR(cuda_status(cudaSetDevice(gpu), "cudaSetDevice"));
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // NVLink multicast off unless the user chose otherwise
  VLM_ASSIGN_OR_RETURN(const NcclApi* api, load_nccl());
  const int timeout_s = collective_timeout_seconds();

  // NCCL's unique id: made by rank 0, sent to the others over MPI (mpirun, srun) or the rendezvous store.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  std::unique_ptr<Communicator> bootstrap;
  if (info.launcher == "torchrun") {
    VLM_ASSIGN_OR_RETURN(LaunchStore * store, launch_store(info, timeout_s));
    const std::string prefix = store->next_prefix("nccl");
    VLM_RETURN_IF_ERROR(store_rendezvous(store->client(), prefix, info.rank, info.size, timeout_s));
    if (info.rank == 0) {
      VLM_RETURN_IF_ERROR(nccl_call(api, api->get_unique_id(&id), "ncclGetUniqueId"));
      VLM_RETURN_IF_ERROR(store->client().set(prefix + "/id", std::string(id.internal, sizeof id.internal)));
    } else {
      VLM_ASSIGN_OR_RETURN(std::string bytes, store->client().get(prefix + "/id", timeout_s));
      if (bytes.size() != sizeof id.internal)
        return parse_error(str("rendezvous store: NCCL id of ", bytes.size(), " bytes (expected ", sizeof id.internal,
                               ")"));
      std::memcpy(id.internal, bytes.data(), bytes.size());
    }
  } else if (info.distributed()) {
    VLM_ASSIGN_OR_RETURN(bootstrap, make_mpi_communicator(info));
    Tensor bytes = Tensor::zeros({static_cast<int64_t>(sizeof id.internal)}, DType::u8);
    if (info.rank == 0) {
      VLM_RETURN_IF_ERROR(nccl_call(api, api->get_unique_id(&id), "ncclGetUniqueId"));
      std::memcpy(bytes.raw_data(), id.internal, sizeof id.internal);
    }
    VLM_RETURN_IF_ERROR(bootstrap->broadcast(bytes, 0).with_context("NCCL unique id"));
    std::memcpy(id.internal, bytes.raw_data(), sizeof id.internal);
  } else {
    VLM_RETURN_IF_ERROR(nccl_call(api, api->get_unique_id(&id), "ncclGetUniqueId"));
  }

  auto shared = std::make_shared<NcclShared>();
  shared->api = api;
  shared->rank = info.rank;
  shared->size = info.size;
  shared->device = gpu;
  shared->timeout_s = timeout_s;
  // ncclCommInitRank waits for every rank; one that dies after the rendezvous would leave it waiting forever, so a
  // timer ends the process past the timeout, as the watchdog does for collectives.
  std::mutex init_mu;
  std::condition_variable init_done;
  bool initialized = false;
  std::thread timer([&] {
    std::unique_lock<std::mutex> lock(init_mu);
    if (init_done.wait_for(lock, std::chrono::seconds(timeout_s), [&] { return initialized; })) return;
    std::fprintf(stderr, "[vlm] rank %d: fatal: ncclCommInitRank of %d ranks did not complete within %d s "
                 "(VLM_DIST_TIMEOUT_S): a rank died after the rendezvous; ending this process\n",
                 info.rank, info.size, timeout_s);
    std::fflush(nullptr);
    std::_Exit(kWatchdogExit);
  });
  const ncclResult_t rc = api->comm_init_rank(&shared->comm, info.size, id, info.rank);
  {
    std::lock_guard<std::mutex> lock(init_mu);
    initialized = true;
  }
  init_done.notify_all();
  timer.join();
  VLM_RETURN_IF_ERROR(nccl_call(api, rc, str("rank ", info.rank, " of ", info.size, ": ncclCommInitRank").c_str()));
  return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(std::move(shared), std::move(bootstrap)));
}

#else  // built without CUDA

bool built_with_nccl() { return false; }

Expected<std::unique_ptr<Communicator>> make_nccl_communicator(const LaunchInfo&, Device device) {
  return unsupported(str("collectives on ", device.to_string(), " need the NCCL backend, which CUDA builds have "
                         "(cmake --preset cuda); this vlm was built without CUDA"));
}

#endif

}  // namespace vlm::dist
