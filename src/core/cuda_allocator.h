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

}  // namespace vlm
