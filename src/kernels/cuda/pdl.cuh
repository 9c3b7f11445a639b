// Programmatic dependent launch (PDL, sm_90 and up) for every kernel of ours. A kernel launched with the
// programmatic-serialization attribute may start while the kernel before it in its stream is still finishing, so
// its CTAs are scheduled behind the previous kernel's last wave instead of after the previous kernel's end and the
// launch latency that follows it. The contract that keeps this safe: every __global__ function under
// src/kernels/cuda calls pdl::grid_begin() before it touches global memory (dev/gpu/check_pdl.py, a CPU test, checks
// that it is the first statement of each kernel; grid_begin_prefetch, which may warm L2 with read-only memory first,
// counts as it). grid_begin waits until the previous grid has completed and its
// writes are visible (griddepcontrol.wait), then lets the next kernel launch once all of this grid's CTAs have got
// that far (griddepcontrol.launch_dependents). Both are no-ops for a kernel launched without the attribute, and
// cuBLASLt's kernels, launched without it, keep plain stream order on both sides.
//
// pdl::launch(kernel, grid, block, smem, stream, args...) launches with the attribute on a device of compute
// capability 9.0 or more (a faster training step); tests may launch without it to compare the bits.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <utility>

#include "core/cuda_check.h"

namespace vlm::pdl {

__device__ __forceinline__ void grid_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// grid_begin() after an L2 prefetch, by this CTA's threads, of [a, a + a_bytes) and [b, b + b_bytes): memory that
// no kernel before this one in the stream can still be writing to in a way the prefetch could break (a prefetch only
// warms L2, the point of coherence, so it never returns stale data; the usual case is the weights a decode-step
// kernel reads). Under PDL this CTA waits here while the previous kernel finishes, so the fetch overlaps it. dev/gpu/
// check_pdl.py accepts this call in grid_begin()'s place.
__device__ __forceinline__ void grid_begin_prefetch(const void* a, int64_t a_bytes, const void* b = nullptr,
                                                    int64_t b_bytes = 0) {
  constexpr int64_t kLine = 128;
  for (int64_t off = threadIdx.x * kLine; off < a_bytes; off += blockDim.x * kLine)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const char*>(a) + off));
  for (int64_t off = threadIdx.x * kLine; off < b_bytes; off += blockDim.x * kLine)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const char*>(b) + off));
  grid_begin();
}

namespace detail {
inline std::atomic<int>& forced() {  // -1: not forced; 0 / 1: force_for_testing
  static std::atomic<int> f{-1};
  return f;
}
}  // namespace detail

// Tests: PDL on (1) or off (0) for every later launch, or back to the default, on (-1).
inline void force_for_testing(int on) { detail::forced().store(on); }

// Whether launches on `device` carry the PDL attribute: unless force_for_testing(0), on a device of compute
// capability 9.0 or more.
inline bool enabled(int device) {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<int>, kMaxDevices> major{};  // 0: not asked yet
  const int f = detail::forced().load(std::memory_order_relaxed);
  if (f == 0 || device < 0 || device >= kMaxDevices) return false;
  int m = major[static_cast<size_t>(device)].load(std::memory_order_relaxed);
  if (m == 0) {
    VLM_CUDA_CHECK(cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, device));
    major[static_cast<size_t>(device)].store(m, std::memory_order_relaxed);
  }
  return m >= 9;
}

// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute when enabled() for the current device;
// launch errors abort, and VLM_CUDA_SYNC debugging syncs, as with VLM_CUDA_CHECK_LAUNCH.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  int device = 0;
  VLM_CUDA_CHECK(cudaGetDevice(&device));
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = enabled(device) ? 1 : 0;
  VLM_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
  if (::vlm::detail::cuda_sync_after_launch()) VLM_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace vlm::pdl
