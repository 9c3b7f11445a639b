// One allocator interface for every kind of memory: CPU (64-byte aligned), pinned host, and CUDA device memory
// through a stream-ordered caching allocator. Tensors hold a pointer to the allocator that made their storage.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace vlm {

// Opaque stream handle (a cudaStream_t on CUDA; ignored on the CPU). nullptr is the default stream.
using StreamHandle = void*;

struct AllocatorStats {
  uint64_t bytes_in_use = 0;      // handed out and not yet freed
  uint64_t peak_bytes_in_use = 0;
  uint64_t bytes_reserved = 0;    // held from the system, including the cache
  uint64_t n_allocs = 0;          // calls to allocate()
  uint64_t n_system_allocs = 0;   // allocations that reached the system (cudaMalloc / aligned_alloc)
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for `bytes` (0 allowed: returns a unique non-null pointer). Aborts when out of memory with the
  // requested size and current usage in the message. Thread-safe.
  virtual void* allocate(size_t bytes, StreamHandle stream = nullptr) = 0;
  virtual void deallocate(void* ptr, size_t bytes, StreamHandle stream = nullptr) = 0;
  virtual Device device() const = 0;
  virtual AllocatorStats stats() const = 0;
  virtual void reset_peak() = 0;
  // Returns cached blocks to the system (no-op where nothing is cached).
  virtual void empty_cache() {}
};

// Process-wide allocators. cpu_allocator() always exists; the others abort in a build without CUDA.
Allocator& cpu_allocator();
Allocator& pinned_allocator();
Allocator& cuda_allocator(int device_index);
Allocator& allocator_for(Device device);

}  // namespace vlm
