// Reused host buffers for batch tensors. A loader fills a ~38 MB image tensor per nanoVLM batch (64 x 3 x 224 x 224
// floats); a fresh allocation that size is a fresh mmap, so every batch would page-fault ~9,400 new pages (zeroed by
// the kernel) on the one thread that builds it. The pool hands out tensors over buffers that no tensor uses any
// more, so in steady state a batch touches only pages it touched before.
// Thread-safe. A tensor from get() keeps its buffer alive on its own (the pool may be destroyed first).
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "core/tensor.h"

namespace vlm {

class BatchBufferPool {
 public:
  // Keeps at most `max_cached` buffers for reuse; more are allocated when all are in use and freed with their
  // last tensor.
  explicit BatchBufferPool(size_t max_cached) : max_cached_(max_cached) {}

  // A contiguous f32 CPU tensor of `shape` (contents undefined): over a cached buffer whose tensors are all gone
  // and that is large enough, else over a new one.
  Tensor get_f32(const Shape& shape);

  size_t cached() const;  // buffers held for reuse (in use or not)

 private:
  struct Buffer;
  size_t max_cached_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Buffer>> buffers_;
};

}  // namespace vlm
