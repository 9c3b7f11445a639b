// Packed 16-byte vectors held in registers (norm.cu, loss.cu): a kernel that keeps a row (or several loads in
// flight) in registers stores the raw uint4 (4 registers, where 8 bf16 values as f32 would take 8) and unpacks it
// where it uses it. Complements load_vec16/store_vec16 of cuda_common.cuh, which load and unpack in one step.
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace vlm::ops::cuda {

// The 16 bytes at p (16-byte aligned), as loaded.
template <class T>
__device__ __forceinline__ uint4 load_raw16(const T* p) {
  return *reinterpret_cast<const uint4*>(p);
}

// The kVec16<T> values of a raw vector as f32 (bf16 widens exactly).
template <class T>
__device__ __forceinline__ void unpack_vec16(const uint4& raw, float (&out)[kVec16<T>]) {
  if constexpr (sizeof(T) == 4) {
    out[0] = __uint_as_float(raw.x);
    out[1] = __uint_as_float(raw.y);
    out[2] = __uint_as_float(raw.z);
    out[3] = __uint_as_float(raw.w);
  } else {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      out[2 * k] = __uint_as_float(words[k] << 16);
      out[2 * k + 1] = __uint_as_float(words[k] & 0xffff0000u);
    }
  }
}

// v as stored in T and read back (bf16: rounded to nearest even; f32: v itself).
template <class T>
__device__ __forceinline__ float round_to(float v) {
  return to_f32(from_f32<T>(v));
}

}  // namespace vlm::ops::cuda
