// Host helpers shared by the Hopper kernels: TMA tensor maps over [rows, heads, d] tensors (bf16 operands, the f32
// dq accumulator), and the device check.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace vlm::flash {

// [rows, heads, d] bf16 with the given strides (elements); boxes of 64 columns x box_rows rows of one head, written
// to shared memory with the 128-byte swizzle that wgmma descriptors expect. Rows past `rows` read as zeros.
CUtensorMap make_tensor_map(const void* base, int64_t rows, int heads, int d, int64_t row_stride, int64_t head_stride,
                            int box_rows);

// Contiguous [rows, heads, d] f32 (an accumulator), boxes of 32 columns (128 bytes, the widest the 128-byte swizzle
// allows) x box_rows rows of one head: the target of TMA reduce-adds. Rows past `rows` are dropped.
CUtensorMap make_f32_reduce_map(float* base, int64_t rows, int heads, int d, int box_rows);

// [heads, rows] f32 row statistics (lse, D) with a head stride that is a multiple of 4; boxes of box_rows rows of one
// head, unswizzled. Rows past `rows` read as zeros. A box must start at a row that is a multiple of 4 (16 bytes):
// other starts fault with an illegal instruction.
CUtensorMap make_f32_stats_map(const float* base, int64_t rows, int heads, int64_t head_stride, int box_rows);

// Streaming multiprocessors of the current device (the persistent kernels' grid size).
int sm_count();

// The persistent-or-not choice of a Hopper kernel: `automatic` unless the environment variable VLM_FLASH_PERSISTENT
// is 0 (one work item per CTA) or 1 (one CTA per SM walking the items), which benchmarks use to compare the two on
// one binary. Read once per process.
bool flash_persistent(bool automatic);

// The Hopper forward's key step for non-causal rows: `automatic` (wide steps for long rows, flash_tiles.h) unless
// VLM_FLASH_WIDE_KEYS is 0 (always 128 keys) or 1 (always the wide step), for tests and A/B runs. Read once.
bool flash_wide_keys(bool automatic);

// Whether the Hopper forward's causal tiles come from a global counter (persistent CTAs taking the next tile as
// they finish one): `automatic` (rows of more than two query blocks) unless VLM_FLASH_DYNAMIC is 0 or 1, for tests
// and A/B runs. Read once.
bool flash_dynamic(bool automatic);

// Whether the Hopper forward's d=64 causal rows take 64-row tiles of one consumer warpgroup, two CTAs per SM
// (HopperFwdTile; `automatic`: rows of at most hopper_fwd_rows64_max_queries queries) unless VLM_FLASH_FWD_ROWS64 is 0
// or 1, for tests and A/B runs. Read once.
bool flash_fwd_rows64(bool automatic);

// Whether the Hopper forward's causal d=128 rows take mixed 128/160-key steps (HopperFwdTile): `automatic` unless
// VLM_FLASH_CAUSAL_WIDE is 0 or 1, for tests and A/B runs. Read once.
bool flash_causal_wide(bool automatic);

// The (head, sequence) pairs per group in the forward's dynamic causal order: `automatic` unless
// VLM_FLASH_CAUSAL_GROUP is set to a positive count, for A/B runs. Read once.
int flash_causal_group(int automatic);

// Two device ints for the dynamic tile schedule {next tile, CTAs done}, one pair per device and stream (so kernels on
// two streams never share one). Zero when allocated (on a stream's first use: not inside a CUDA graph capture, which
// forbids cudaMalloc; nothing here captures graphs); every kernel that uses them leaves them zero again (its last
// CTA resets them), so no memset runs before a launch and a captured launch would replay correctly.
int* flash_tile_counter(cudaStream_t stream);

// True when the current device is compute capability 9.0 (H100 / H200), which the sm_90a code needs.
bool device_is_sm90();

}  // namespace vlm::flash
