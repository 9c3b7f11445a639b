// Host helpers shared by the Hopper kernels: TMA tensor maps over [rows, heads, d] bf16 tensors, and the device check.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace vlm::flash {

// [rows, heads, d] bf16 with the given strides (elements); boxes of 64 columns x box_rows rows of one head, written
// to shared memory with the 128-byte swizzle that wgmma descriptors expect. Rows past `rows` read as zeros.
CUtensorMap make_tensor_map(const void* base, int64_t rows, int heads, int d, int64_t row_stride, int64_t head_stride,
                            int box_rows);

// True when the current device is compute capability 9.0 (H100 / H200), which the sm_90a code needs.
bool device_is_sm90();

}  // namespace vlm::flash
