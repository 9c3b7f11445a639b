// CUDA memory: a stream-ordered caching device allocator and a pinned-host allocator.
// A freed device block goes back to the free list of the stream it was allocated on and is reused only by later
// allocations on that same stream, so reuse needs no synchronization (work on one stream runs in order). A tensor
// used on a second stream must be kept alive by the caller until that stream is done with it.
#pragma once

#include "core/allocator.h"

namespace vlm {

// Called by allocator.cpp; defined in cuda_allocator.cpp. Without CUDA these abort with a clear message.
Allocator& cuda_allocator(int device_index);
Allocator& pinned_allocator();

// Private memory pools for CUDA graphs. While a CudaPoolScope is alive on a thread, that thread's allocations on
// cuda:`device` come from the pool `pool` (any unique non-null key) and their frees return to it: a graph captured
// in the scope replays into those blocks, so no other work may be handed them and empty_cache() keeps them. Blocks
// freed inside the pool are reused by later allocations in a scope of the same pool (graphs sharing a pool must not
// run concurrently). Without CUDA the scope does nothing.
class CudaPoolScope {
 public:
  CudaPoolScope(int device, const void* pool);
  ~CudaPoolScope();
  CudaPoolScope(const CudaPoolScope&) = delete;
  CudaPoolScope& operator=(const CudaPoolScope&) = delete;

 private:
  int previous_device_;
  const void* previous_pool_;
};
// Gives the pool's free blocks back to the system and ends its privacy (blocks still held are cached normally once
// freed). Call once the graphs that replay into the pool are destroyed.
void release_cuda_pool(int device, const void* pool);

}  // namespace vlm
