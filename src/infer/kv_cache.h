// The KV cache's memory: per decoder layer one K slab and one V slab of [num_blocks, block_size, kv_heads,
// head_dim] in the model's compute dtype, which BlockPool hands out block by block. Sized from a byte budget
// (--kv-memory) or from a fraction of the device memory free once the model is loaded.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "model/text_decoder.h"

namespace vlm::infer {

struct KvCacheShape {
  int layers = 0, kv_heads = 0, head_dim = 0, block_size = 16;
  DType dtype = DType::f32;
  // K and V of one block in every layer.
  int64_t bytes_per_block() const {
    return int64_t{2} * layers * block_size * kv_heads * head_dim * static_cast<int64_t>(dtype_size(dtype));
  }
};

KvCacheShape kv_cache_shape(const TextConfig& text, int block_size, DType dtype);

// Bytes the cache may take on `device`: `bytes` when > 0; else `fraction` of the free memory on a CUDA device,
// or 1 GiB on the CPU (where the budget is only a cap on what the cache allocates).
int64_t kv_cache_budget(Device device, int64_t bytes, double fraction);

class KvCache {
 public:
  // Allocates the slabs (contents undefined: every slot is written before it is read).
  KvCache(const KvCacheShape& shape, int64_t num_blocks, Device device);
  const KvCacheShape& shape() const { return shape_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t bytes() const { return num_blocks_ * shape_.bytes_per_block(); }
  PagedKvCaches& caches() { return caches_; }
  // Copies block `src` into block `dst` in every layer (copy-on-write of a shared partial block).
  void copy_block(int32_t src, int32_t dst);

 private:
  KvCacheShape shape_;
  int64_t num_blocks_ = 0;
  PagedKvCaches caches_;
};

}  // namespace vlm::infer
