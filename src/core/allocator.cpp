// The CPU allocator (64-byte aligned, counted) and the dispatch to device allocators.
#include "core/allocator.h"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "core/cuda_allocator.h"

namespace vlm {
namespace {

class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() {
    // Training allocates and frees the same activation sizes every step. Keep freed blocks in the heap instead of
    // returning them to the kernel (glibc would mmap/munmap blocks above 128 KiB): fresh pages cost a page fault
    // each, which measured ~25% of a CPU training step before this.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
  }
  void* allocate(size_t bytes, StreamHandle) override {
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    void* p = std::aligned_alloc(64, rounded);
    VLM_CHECK(p != nullptr, "CPU allocation of ", bytes, " bytes failed (in use: ", in_use_.load(), " bytes)");
    uint64_t now = in_use_.fetch_add(rounded) + rounded;
    uint64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    ++n_allocs_;
    return p;
  }
  void deallocate(void* ptr, size_t bytes, StreamHandle) override {
    if (!ptr) return;
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    in_use_ -= rounded;
    std::free(ptr);
  }
  Device device() const override { return Device::cpu(); }
  AllocatorStats stats() const override {
    AllocatorStats s;
    s.bytes_in_use = in_use_.load();
    s.peak_bytes_in_use = peak_.load();
    s.bytes_reserved = s.bytes_in_use;
    s.n_allocs = n_allocs_.load();
    s.n_system_allocs = s.n_allocs;
    return s;
  }
  void reset_peak() override { peak_ = in_use_.load(); }

 private:
  std::atomic<uint64_t> in_use_{0}, peak_{0}, n_allocs_{0};
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator* a = new CpuAllocator();  // never destroyed: tensors may outlive static destructors
  return *a;
}

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  return cuda_allocator(device.index);
}

}  // namespace vlm
