// The quant family on CUDA: fp8 E4M3 with one f32 scale per block of 128 elements, the same bytes as the CPU
// reference (kernels/fp8_e4m3.h). quantize: one warp a block (4 elements a lane, the block's amax by warp_max);
// dequantize: one thread an element.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/fp8_e4m3.h"

namespace vlm::ops::cuda {

namespace {

constexpr int kWarpsPerCta = 8;
static_assert(fp8::kBlock == 4 * 32, "a warp covers one block with 4 elements a lane");

template <class T>
__global__ void quantize_kernel(uint8_t* __restrict__ q, float* __restrict__ scales, const T* __restrict__ x,
                                int64_t n, int64_t blocks) {
  pdl::grid_begin();
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerCta;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * kWarpsPerCta + (threadIdx.x >> 5); b < blocks; b += warps) {
    float v[4];
    float amax = 0.f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = b * fp8::kBlock + k * 32 + lane;
      v[k] = i < n ? to_f32(x[i]) : 0.f;
      amax = fmaxf(amax, fabsf(v[k]));
    }
    amax = warp_max(amax);
    const float inv = fp8::block_inverse(amax);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = b * fp8::kBlock + k * 32 + lane;
      if (i < n) q[i] = fp8::encode(__fmul_rn(v[k], inv));
    }
    if (lane == 0) scales[b] = fp8::block_scale(amax);
  }
}

template <class T>
__global__ void dequantize_kernel(T* __restrict__ x, const uint8_t* __restrict__ q, const float* __restrict__ scales,
                                  int64_t n) {
  pdl::grid_begin();
  VLM_GRID_STRIDE_LOOP(i, n) x[i] = from_f32<T>(__fmul_rn(fp8::decode(q[i]), scales[i / fp8::kBlock]));
}

}  // namespace

void quantize_fp8_blocks(Tensor& q, Tensor& scales, const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t blocks = ceil_div(n, fp8::kBlock);
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "quantize_fp8_blocks", [&](auto tag) {
    using T = decltype(tag);
    pdl::launch(quantize_kernel<T>, grid_for(blocks, kWarpsPerCta), kWarpsPerCta * 32, 0, stream_of(x.device()),
                ptr<uint8_t>(q), ptr<float>(scales), ptr<T>(x), n, blocks);
  });
}

void dequantize_fp8_blocks(Tensor& x, const Tensor& q, const Tensor& scales) {
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(x.device());
  dispatch_float(x.dtype(), "dequantize_fp8_blocks", [&](auto tag) {
    using T = decltype(tag);
    pdl::launch(dequantize_kernel<T>, grid_for(n, 256), 256, 0, stream_of(x.device()), ptr<T>(x), ptr<uint8_t>(q),
                ptr<float>(scales), n);
  });
}

}  // namespace vlm::ops::cuda
