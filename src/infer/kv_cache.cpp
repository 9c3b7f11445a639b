// KvCache: the per-layer slabs and their sizing.
#include "infer/kv_cache.h"

#include "core/allocator.h"

#ifdef VLM_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#endif

namespace vlm::infer {

KvCacheShape kv_cache_shape(const TextConfig& text, int block_size, DType dtype) {
  return KvCacheShape{text.layers, text.kv_heads, text.head_dim(), block_size, dtype};
}

int64_t kv_cache_budget(Device device, int64_t bytes, double fraction) {
  if (bytes > 0) return bytes;
  if (device.is_cpu()) return int64_t{1} << 30;
#ifdef VLM_HAVE_CUDA
  size_t free_bytes = 0, total_bytes = 0;
  VLM_CUDA_CHECK(cudaSetDevice(device.index));
  // Blocks our caching allocator holds free (e.g. an earlier engine's KV cache) count as free: hand them back first.
  VLM_CUDA_CHECK(cudaDeviceSynchronize());
  cuda_allocator(device.index).empty_cache();
  VLM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<int64_t>(static_cast<double>(free_bytes) * fraction);
#else
  VLM_CHECK(false, "kv_cache_budget: ", device.to_string(), " in a build without CUDA");
  return 0;
#endif
}

KvCache::KvCache(const KvCacheShape& shape, int64_t num_blocks, Device device)
    : shape_(shape), num_blocks_(num_blocks) {
  VLM_CHECK(num_blocks > 0, "KvCache: ", num_blocks, " blocks");
  const Shape slab{num_blocks, shape.block_size, shape.kv_heads, shape.head_dim};
  // On the CPU the slabs are zeroed, so their pages are resident from the start: a server's memory is its budget at
  // once instead of growing as the free list first hands out each block (which looks like a leak under load).
  const auto slab_tensor = [&] {
    return device.is_cpu() ? Tensor::zeros(slab, shape.dtype, device) : Tensor::empty(slab, shape.dtype, device);
  };
  for (int l = 0; l < shape.layers; ++l) {
    caches_.k.push_back(slab_tensor());
    caches_.v.push_back(slab_tensor());
  }
}

void KvCache::copy_block(int32_t src, int32_t dst) {
  VLM_CHECK(src >= 0 && src < num_blocks_ && dst >= 0 && dst < num_blocks_, "KvCache::copy_block ", src, " -> ", dst);
  for (auto* slabs : {&caches_.k, &caches_.v})
    for (Tensor& t : *slabs) {
      Tensor d = t.slice(0, dst, dst + 1);
      d.copy_from(t.slice(0, src, src + 1));
    }
}

}  // namespace vlm::infer
