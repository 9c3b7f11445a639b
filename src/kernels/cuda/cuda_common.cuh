// Device-side helpers shared by the op kernels: bf16/f32 loads and stores (math always in f32, bf16 rounded to
// nearest even once, on store), deterministic warp/block reductions, launch sizes that handle empty inputs, the
// f32/bf16 dispatch, typed pointers of Tensors and the index-error recorder; every kernel's launch goes through
// pdl.cuh (pdl::launch, and pdl::grid_begin() first in each kernel).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/tensor.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/pdl.cuh"

namespace vlm::ops::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) {
  return __float2bfloat16_rn(x);
}

// Sum over the 32 lanes of a full warp. The xor butterfly gives every lane the same bits (each step adds the same
// two values on both partner lanes), so a warp-wide result is deterministic and uniform.
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32); every thread gets the same result. `scratch` holds 32 values of
// shared memory. Synchronizes the block, so it is safe to call repeatedly with the same scratch.
template <class V>
__device__ __forceinline__ V block_sum(V v, V* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // a previous call may still be reading scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : V(0);
  return warp_sum(v);
}

// Online-softmax state: running max m and sum s of exp(x - m). combine() is exact up to rounding and handles the
// empty state (m = -inf, s = 0).
struct MaxSum {
  float m, s;
};
__device__ __forceinline__ MaxSum max_sum_combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}
__device__ __forceinline__ MaxSum max_sum_add(MaxSum a, float x) {
  if (x == -INFINITY) return a;  // adds exp(-inf) = 0 (also keeps an empty state empty)
  if (x <= a.m) return {a.m, a.s + expf(x - a.m)};
  return {x, a.s * expf(a.m - x) + 1.f};  // a NaN x lands here and poisons the state
}
__device__ __forceinline__ MaxSum warp_max_sum(MaxSum v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    MaxSum o{__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.s, offset)};
    v = max_sum_combine(v, o);  // symmetric in its arguments: both partner lanes get the same bits
  }
  return v;
}
// Block-wide MaxSum; every thread gets the same result. `scratch` holds 32 entries of shared memory.
__device__ __forceinline__ MaxSum block_max_sum(MaxSum v, MaxSum* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : MaxSum{-INFINITY, 0.f};
  return warp_max_sum(v);
}

// Records the first bad index of a launch on the device (see IndexErrorRecord); later ones are dropped.
__device__ __forceinline__ void record_index_error(IndexErrorRecord* rec, IndexErrorOp op, int64_t position,
                                                   int64_t value, int64_t limit) {
  if (atomicCAS(&rec->op, 0, static_cast<int32_t>(op)) == 0) {
    rec->position = position;
    rec->value = value;
    rec->limit = limit;
  }
}

// ---- 16-byte vector access (8 bf16 or 4 f32 per load/store: full-width memory transactions) --------------------
template <class T>
inline constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

// The 16 bytes at p (16-byte aligned), as loaded: a kernel that keeps a row (or several loads in flight) in
// registers holds the raw uint4 (4 registers, where 8 bf16 values as f32 would take 8) and unpacks it where used.
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

// Loads kVec16<T> consecutive elements at p (16-byte aligned) as f32.
template <class T>
__device__ __forceinline__ void load_vec16(const T* p, float (&out)[kVec16<T>]) {
  unpack_vec16<T>(load_raw16(p), out);
}

// v as stored in T and read back (bf16: rounded to nearest even; f32: v itself).
template <class T>
__device__ __forceinline__ float round_to(float v) {
  return to_f32(from_f32<T>(v));
}

// Stores kVec16<T> f32 values to p (16-byte aligned), rounding to T once.
template <class T>
__device__ __forceinline__ void store_vec16(T* p, const float (&in)[kVec16<T>]) {
  uint4 raw;
  if constexpr (sizeof(T) == 4) {
    raw = make_uint4(__float_as_uint(in[0]), __float_as_uint(in[1]), __float_as_uint(in[2]), __float_as_uint(in[3]));
  } else {
    uint32_t words[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const __nv_bfloat162 pair = __floats2bfloat162_rn(in[2 * k], in[2 * k + 1]);
      words[k] = *reinterpret_cast<const uint32_t*>(&pair);
    }
    raw = make_uint4(words[0], words[1], words[2], words[3]);
  }
  *reinterpret_cast<uint4*>(p) = raw;
}

// True when every pointer given is 16-byte aligned (null pointers count as aligned).
template <class... P>
inline bool all_aligned16(const P*... ptrs) {
  return ((reinterpret_cast<uintptr_t>(ptrs) % 16 == 0) && ...);
}

// for (int64_t i ...) over [0, n) with a grid-stride step: any grid covers any n.
#define VLM_GRID_STRIDE_LOOP(i, n)                                                             \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);       \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// ---- host side ------------------------------------------------------------------------------------------------

inline cudaStream_t stream_of(Device device) { return static_cast<cudaStream_t>(current_stream(device)); }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The streaming multiprocessors of `device` (asked once per device).
inline int multiprocessors(int device) {
  static int cached[64] = {};
  int& n = cached[std::clamp(device, 0, 63)];
  if (n == 0) VLM_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return n;
}

// Blocks for a grid-stride loop over n elements (n > 0): enough to fill the GPU, capped so the loop does the rest.
inline unsigned grid_for(int64_t n, int threads) {
  return static_cast<unsigned>(std::clamp<int64_t>(ceil_div(n, threads), 1, int64_t{1} << 16));
}

// Typed pointers of a (validated) tensor; optional tensors give nullptr.
template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}
template <class T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.raw_data()) : nullptr;
}

// Calls f(T{}) with T = float or bf16 for the compute dtype; other dtypes abort naming the op.
template <class F>
void dispatch_float(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::f32:
      f(float{});
      return;
    case DType::bf16:
      f(bf16{});
      return;
    default:
      VLM_FAIL("ops::", op, ": CUDA ops compute in f32 or bf16, got ", dtype_name(dtype));
  }
}

}  // namespace vlm::ops::cuda
