// Caching CUDA allocator (size-rounded, best-fit per stream, cache flushed and retried on OOM) and pinned host
// memory via cudaHostAlloc. Built without CUDA, the accessors abort saying so.
#include "core/cuda_allocator.h"

#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#ifdef VLM_HAVE_CUDA
#include "core/cuda_check.h"
#include "core/env.h"
#endif

namespace vlm {

#ifdef VLM_HAVE_CUDA
namespace detail {
bool cuda_sync_after_launch() {
  static const bool sync = env::flag("VLM_CUDA_SYNC");
  return sync;
}
}  // namespace detail

namespace {

// The pool a CudaPoolScope made current on this thread (nullptr: none).
thread_local int tl_pool_device = -1;
thread_local const void* tl_pool = nullptr;

constexpr size_t kSmallGranule = 512;             // small tensors share few bytes of slack
constexpr size_t kLargeGranule = 2u << 20;        // large blocks round to 2 MiB so they can be reused widely
constexpr size_t kSmallLimit = 1u << 20;          // below 1 MiB counts as small

size_t round_block(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes < kSmallLimit) return (bytes + kSmallGranule - 1) / kSmallGranule * kSmallGranule;
  return (bytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
}

class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int device) : device_(device) {}

  void* allocate(size_t bytes, StreamHandle stream) override {
    const size_t size = round_block(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.n_allocs;
    if (tl_pool != nullptr && tl_pool_device == device_) {  // a graph's pool: its own free list, kept for good
      stream = const_cast<void*>(tl_pool);
      private_.insert(stream);
    }
    auto& free_list = free_[stream];
    auto it = free_list.lower_bound(size);
    // Best fit, but never hand out a block more than twice as large as asked (it would strand memory).
    if (it != free_list.end() && it->first <= 2 * size) {
      void* p = it->second;
      size_t block = it->first;
      free_list.erase(it);
      live_[p] = {block, stream};
      note_use(block);
      return p;
    }
    void* p = system_alloc(size);
    live_[p] = {size, stream};
    note_use(size);
    return p;
  }

  void deallocate(void* ptr, size_t, StreamHandle) override {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    VLM_CHECK(it != live_.end(), "cuda allocator: freeing a pointer it did not allocate");
    stats_.bytes_in_use -= it->second.size;
    free_[it->second.stream].emplace(it->second.size, ptr);
    live_.erase(it);
  }

  Device device() const override { return Device::cuda(device_); }
  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }
  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mu_);
    release_cached();
  }
  void release_pool(const void* pool) {
    std::lock_guard<std::mutex> lock(mu_);
    StreamHandle key = const_cast<void*>(pool);
    if (private_.erase(key) == 0) return;
    release_list(free_[key]);
  }

 private:
  struct Live {
    size_t size;
    StreamHandle stream;
  };

  void note_use(size_t size) {
    stats_.bytes_in_use += size;
    if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }

  void* system_alloc(size_t size) {
    int prev = 0;
    VLM_CUDA_CHECK(cudaGetDevice(&prev));
    VLM_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_cached();  // give the cache back and try once more
      err = cudaMalloc(&p, size);
    }
    VLM_CHECK(err == cudaSuccess, "cudaMalloc of ", size, " bytes on cuda:", device_, " failed (",
              cudaGetErrorString(err), "); in use ", stats_.bytes_in_use, " bytes, reserved ", stats_.bytes_reserved);
    VLM_CUDA_CHECK(cudaSetDevice(prev));
    stats_.bytes_reserved += size;
    ++stats_.n_system_allocs;
    return p;
  }

  // Caller holds mu_. Waits for the device so no cached block is still used by queued work.
  void release_cached() {
    int prev = 0;
    VLM_CUDA_CHECK(cudaGetDevice(&prev));
    VLM_CUDA_CHECK(cudaSetDevice(device_));
    VLM_CUDA_CHECK(cudaDeviceSynchronize());
    for (auto& [stream, list] : free_)
      if (private_.count(stream) == 0) release_list(list);
    VLM_CUDA_CHECK(cudaSetDevice(prev));
  }

  // Caller holds mu_, on the allocator's device, with the device idle.
  void release_list(std::multimap<size_t, void*>& list) {
    for (auto& [size, p] : list) {
      VLM_CUDA_CHECK(cudaFree(p));
      stats_.bytes_reserved -= size;
    }
    list.clear();
  }

  int device_;
  mutable std::mutex mu_;
  std::unordered_map<StreamHandle, std::multimap<size_t, void*>> free_;
  std::unordered_map<void*, Live> live_;
  std::unordered_set<StreamHandle> private_;  // graph pools: never released by empty_cache
  AllocatorStats stats_;
};

class PinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, StreamHandle) override {
    void* p = nullptr;
    VLM_CUDA_CHECK(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault));
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_in_use += bytes;
    stats_.bytes_reserved += bytes;
    ++stats_.n_allocs;
    ++stats_.n_system_allocs;
    if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
    return p;
  }
  void deallocate(void* ptr, size_t bytes, StreamHandle) override {
    if (!ptr) return;
    VLM_CUDA_CHECK(cudaFreeHost(ptr));
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_in_use -= bytes;
    stats_.bytes_reserved -= bytes;
  }
  Device device() const override { return Device::cpu(); }
  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }

 private:
  mutable std::mutex mu_;
  AllocatorStats stats_;
};

}  // namespace

Allocator& cuda_allocator(int device_index) {
  static std::mutex mu;
  static std::vector<CudaCachingAllocator*> allocators;  // leaked on purpose: outlives static tensors
  std::lock_guard<std::mutex> lock(mu);
  VLM_CHECK(device_index >= 0 && device_index < 1024, "bad CUDA device index ", device_index);
  if (allocators.empty()) {
    int n = 0;
    VLM_CUDA_CHECK(cudaGetDeviceCount(&n));
    allocators.resize(static_cast<size_t>(n), nullptr);
  }
  VLM_CHECK(device_index < static_cast<int>(allocators.size()), "cuda:", device_index, " does not exist (",
            allocators.size(), " devices visible)");
  auto& a = allocators[static_cast<size_t>(device_index)];
  if (!a) a = new CudaCachingAllocator(device_index);
  return *a;
}

Allocator& pinned_allocator() {
  static PinnedAllocator* a = new PinnedAllocator();
  return *a;
}

CudaPoolScope::CudaPoolScope(int device, const void* pool) : previous_device_(tl_pool_device), previous_pool_(tl_pool) {
  VLM_CHECK(pool != nullptr, "CudaPoolScope: a pool key must not be null");
  tl_pool_device = device;
  tl_pool = pool;
}

CudaPoolScope::~CudaPoolScope() {
  tl_pool_device = previous_device_;
  tl_pool = previous_pool_;
}

void release_cuda_pool(int device, const void* pool) {
  int prev = 0;
  VLM_CUDA_CHECK(cudaGetDevice(&prev));
  VLM_CUDA_CHECK(cudaSetDevice(device));
  VLM_CUDA_CHECK(cudaDeviceSynchronize());  // no replay may still use the blocks
  static_cast<CudaCachingAllocator&>(cuda_allocator(device)).release_pool(pool);
  VLM_CUDA_CHECK(cudaSetDevice(prev));
}

#else  // !VLM_HAVE_CUDA

Allocator& cuda_allocator(int device_index) {
  VLM_FAIL("cuda:", device_index, " requested, but this binary was built without CUDA (configure with --preset cuda)");
}
Allocator& pinned_allocator() { VLM_FAIL("pinned memory requested, but this binary was built without CUDA"); }
CudaPoolScope::CudaPoolScope(int device, const void* pool) : previous_device_(device), previous_pool_(pool) {}
CudaPoolScope::~CudaPoolScope() = default;
void release_cuda_pool(int, const void*) {}

#endif

}  // namespace vlm
