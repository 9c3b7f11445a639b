// flash_fwd / flash_bwd: the runtime dispatch from (head dim, element type, path) to the compiled launchers, and
// the backward's workspace. Which (head dim, element) pairs exist is decided by CMake (VLM_FLASH_HEAD_DIMS,
// VLM_FLASH_DTYPES), passed in as VLM_FLASH_HAS_<dim>_<dtype> definitions.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/allocator.h"
#include "core/cuda_check.h"
#include "kernels/cuda/flash/flash_dispatch.h"
#include "kernels/cuda/flash/flash_launch.h"
#include "kernels/cuda/flash/flash_tiles.h"

namespace vlm::flash {

namespace {

using FwdFn = void (*)(const FlashFwdParams&, cudaStream_t);
using BwdFn = void (*)(const FlashBwdParams&, float*, float*, cudaStream_t);

struct Entry {
  int head_dim;
  FlashDType dtype;
  FwdFn fwd;
  BwdFn bwd;
};

#define VLM_FLASH_ENTRY(D, T, E) Entry{D, FlashDType::T, &run_flash_fwd<D, E>, &run_flash_bwd<D, E>},
constexpr Entry kEntries[] = {
#if VLM_FLASH_HAS_64_bf16
    VLM_FLASH_ENTRY(64, bf16, __nv_bfloat16)
#endif
#if VLM_FLASH_HAS_96_bf16
    VLM_FLASH_ENTRY(96, bf16, __nv_bfloat16)
#endif
#if VLM_FLASH_HAS_128_bf16
    VLM_FLASH_ENTRY(128, bf16, __nv_bfloat16)
#endif
#if VLM_FLASH_HAS_256_bf16
    VLM_FLASH_ENTRY(256, bf16, __nv_bfloat16)
#endif
#if VLM_FLASH_HAS_64_f16
    VLM_FLASH_ENTRY(64, f16, __half)
#endif
#if VLM_FLASH_HAS_96_f16
    VLM_FLASH_ENTRY(96, f16, __half)
#endif
#if VLM_FLASH_HAS_128_f16
    VLM_FLASH_ENTRY(128, f16, __half)
#endif
#if VLM_FLASH_HAS_256_f16
    VLM_FLASH_ENTRY(256, f16, __half)
#endif
    Entry{0, FlashDType::bf16, nullptr, nullptr}};
#undef VLM_FLASH_ENTRY

const Entry* find_entry(int head_dim, FlashDType dtype) {
  const int padded = padded_head_dim(head_dim);
  for (const Entry& e : kEntries)
    if (e.fwd && e.head_dim == padded && e.dtype == dtype) return &e;
  return nullptr;
}

size_t round_up(size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

bool flash_built() { return true; }

bool flash_portable_supports(int head_dim, FlashDType dtype) { return find_entry(head_dim, dtype) != nullptr; }

FlashPath flash_fwd_path(const FlashFwdParams& p) {
  if (p.path != FlashPath::portable && flash_hopper_fwd_supports(p))
    return FlashPath::hopper;
  return FlashPath::portable;
}

Status flash_fwd(const FlashFwdParams& p, StreamHandle stream) {
  VLM_RETURN_IF_ERROR(flash_fwd_check(p));
  const auto s = static_cast<cudaStream_t>(stream);
  if (flash_fwd_path(p) == FlashPath::hopper) return flash_hopper_fwd(p, s);
  if (p.path == FlashPath::hopper) return unsupported("flash_fwd: the Hopper path does not support this problem");
  find_entry(p.head_dim, p.dtype)->fwd(p, s);
  return Status();
}

// The row statistics: D (and the Hopper path's lse in log2 units) per (head, query row), rows padded to 4.
static size_t stats_bytes(const FlashBwdParams& p) {
  return round_up(2 * static_cast<size_t>(p.n_heads_q) * static_cast<size_t>(flash_stats_stride(p.total_q)) * 4);
}

size_t flash_bwd_workspace_bytes(const FlashBwdParams& p) {
  const size_t rows = static_cast<size_t>(p.total_q) * static_cast<size_t>(p.n_heads_q);
  const size_t dsum = stats_bytes(p);
  const size_t accum = p.deterministic ? 0 : round_up(rows * static_cast<size_t>(padded_head_dim(p.head_dim)) * 4);
  return dsum + accum;
}

FlashPath flash_bwd_path(const FlashBwdParams& p) {
  if (p.path != FlashPath::portable && flash_hopper_bwd_supports(p))
    return FlashPath::hopper;
  return FlashPath::portable;
}

Status flash_bwd(const FlashBwdParams& params, StreamHandle stream) {
  VLM_RETURN_IF_ERROR(flash_bwd_check(params));
  FlashBwdParams p = params;
  const FlashPath path = flash_bwd_path(p);
  if (p.path == FlashPath::hopper && path != FlashPath::hopper)
    return unsupported("flash_bwd: the Hopper path does not support this problem (deterministic, dtype, head dim)");
  const auto s = static_cast<cudaStream_t>(stream);
  const size_t bytes = flash_bwd_workspace_bytes(p);
  void* ws = p.workspace;
  Allocator* alloc = nullptr;
  if (!ws) {
    int device = 0;
    VLM_CUDA_CHECK(cudaGetDevice(&device));
    alloc = &cuda_allocator(device);
    ws = alloc->allocate(bytes, stream);
  }
  float* dsum = static_cast<float*>(ws);
  float* dq_accum = p.deterministic ? nullptr : reinterpret_cast<float*>(static_cast<char*>(ws) + stats_bytes(p));
  const Status st = path == FlashPath::hopper ? flash_hopper_bwd(p, dsum, dq_accum, s) : Status();
  if (path != FlashPath::hopper) find_entry(p.head_dim, p.dtype)->bwd(p, dsum, dq_accum, s);
  if (alloc) alloc->deallocate(ws, bytes, stream);
  return st;
}

}  // namespace vlm::flash
