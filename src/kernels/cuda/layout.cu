// Data movement of the vision path on CUDA: patch extraction (conv-as-GEMM input) and nanoVLM's pixel shuffle,
// forward and backward. Both are bijections, so every kernel runs one thread per DESTINATION element or vector
// (coalesced writes, every output element written exactly once) and computes the index of its source. Both maps keep
// runs of consecutive elements together (a patch row of `patch` pixels; a token's `cols` features), so where a run
// holds whole 16-byte vectors and the pointers are aligned (the model's shapes), a thread moves one vector and does
// the index arithmetic once for it: the scalar form spent its time in 64-bit divisions (a 64 x 3 x 224 x 224 bf16
// batch took ~150 us to cut into patches).
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace vlm::ops::cuda {

namespace {

constexpr int kThreads = 256;

// Moves kV consecutive elements: one 16-byte vector (both pointers aligned) or, with kV == 1, one element.
template <class T, int kV>
__device__ __forceinline__ void move_elements(T* dst, const T* src) {
  static_assert(kV == 1 || kV * sizeof(T) == 16, "a vector is 16 bytes");
  if constexpr (kV == 1) *dst = *src;
  else *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}

struct PatchGeometry {
  int64_t channels, height, width, patch, grid_h, grid_w, features;  // features = channels * patch * patch
};

// patches[r, f] <- images: r = (b * grid_h + py) * grid_w + px, f = (c * p + ky) * p + kx; kV elements per thread
// (kV divides p and the width: a vector never leaves a patch row).
template <class T, int kV>
__global__ void image_to_patches_kernel(T* __restrict__ patches, const T* __restrict__ images, int64_t n,
                                        PatchGeometry g) {
  pdl::grid_begin();
  VLM_GRID_STRIDE_LOOP(v, n / kV) {
    const int64_t e = v * kV;
    const int64_t r = e / g.features, f = e % g.features;
    const int64_t c = f / (g.patch * g.patch), ky = (f / g.patch) % g.patch, kx = f % g.patch;
    const int64_t b = r / (g.grid_h * g.grid_w), py = (r / g.grid_w) % g.grid_h, px = r % g.grid_w;
    move_elements<T, kV>(patches + e,
                         images + ((b * g.channels + c) * g.height + py * g.patch + ky) * g.width + px * g.patch + kx);
  }
}

// dimages[b, c, y, x] <- dpatches (the inverse map), kV elements per thread.
template <class T, int kV>
__global__ void patches_to_image_kernel(T* __restrict__ images, const T* __restrict__ patches, int64_t n,
                                        PatchGeometry g) {
  pdl::grid_begin();
  VLM_GRID_STRIDE_LOOP(v, n / kV) {
    const int64_t e = v * kV;
    const int64_t x = e % g.width, y = (e / g.width) % g.height;
    const int64_t c = (e / (g.width * g.height)) % g.channels, b = e / (g.width * g.height * g.channels);
    const int64_t r = (b * g.grid_h + y / g.patch) * g.grid_w + x / g.patch;
    const int64_t f = (c * g.patch + y % g.patch) * g.patch + x % g.patch;
    move_elements<T, kV>(images + e, patches + r * g.features + f);
  }
}

struct ShuffleGeometry {
  int64_t side, out_side, cols, factor, out_cols;  // out_side = side / factor, out_cols = cols * factor^2
};

// y[b, ho * So + wo, (ry * r + rx) * C + c] <- x[b, (ho * r + ry) * S + wo * r + rx, c], kV elements per thread
// (kV divides C).
template <class T, int kV>
__global__ void pixel_shuffle_kernel(T* __restrict__ y, const T* __restrict__ x, int64_t n, ShuffleGeometry g) {
  pdl::grid_begin();
  VLM_GRID_STRIDE_LOOP(v, n / kV) {
    const int64_t e = v * kV;
    const int64_t col = e % g.out_cols, row = e / g.out_cols;  // row over b * So^2
    const int64_t b = row / (g.out_side * g.out_side), rem = row % (g.out_side * g.out_side);
    const int64_t ho = rem / g.out_side, wo = rem % g.out_side;
    const int64_t q = col / g.cols, c = col % g.cols, ry = q / g.factor, rx = q % g.factor;
    const int64_t src_row = b * g.side * g.side + (ho * g.factor + ry) * g.side + wo * g.factor + rx;
    move_elements<T, kV>(y + e, x + src_row * g.cols + c);
  }
}

// dx[b, yy * S + xx, c] <- dy (the inverse map), kV elements per thread.
template <class T, int kV>
__global__ void pixel_unshuffle_kernel(T* __restrict__ x, const T* __restrict__ y, int64_t n, ShuffleGeometry g) {
  pdl::grid_begin();
  VLM_GRID_STRIDE_LOOP(v, n / kV) {
    const int64_t e = v * kV;
    const int64_t c = e % g.cols, row = e / g.cols;  // row over b * S^2
    const int64_t b = row / (g.side * g.side), rem = row % (g.side * g.side);
    const int64_t yy = rem / g.side, xx = rem % g.side;
    const int64_t ho = yy / g.factor, ry = yy % g.factor, wo = xx / g.factor, rx = xx % g.factor;
    const int64_t src_row = b * g.out_side * g.out_side + ho * g.out_side + wo;
    move_elements<T, kV>(x + e, y + src_row * g.out_cols + (ry * g.factor + rx) * g.cols + c);
  }
}

// Calls launch(integral_constant<kV>, grid) with kV = kVec16<T> (vector_ok: every run of consecutive elements holds
// whole 16-byte vectors and both pointers are aligned) or 1, and a grid for n / kV threads.
template <class T, class Launch>
void launch_layout(int64_t n, bool vector_ok, Launch&& launch) {
  constexpr int kV = kVec16<T>;
  if (vector_ok) launch(std::integral_constant<int, kV>{}, grid_for(n / kV, kThreads));
  else launch(std::integral_constant<int, 1>{}, grid_for(n, kThreads));
}

}  // namespace

void image_to_patches(Tensor& dst, const Tensor& src, int64_t channels, int64_t height, int64_t width, int64_t patch,
                      bool backward) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const PatchGeometry g{channels, height, width, patch, height / patch, width / patch, channels * patch * patch};
  DeviceGuard guard(dst.device());
  cudaStream_t stream = stream_of(dst.device());
  // Vectors stay inside a patch row when they divide the patch and the images tile exactly into patches.
  const bool exact_tiles = g.grid_h * patch == height && g.grid_w * patch == width;
  dispatch_float(dst.dtype(), backward ? "image_to_patches_backward" : "image_to_patches", [&](auto tag) {
    using T = decltype(tag);
    const bool vec = exact_tiles && patch % kVec16<T> == 0 && all_aligned16(ptr<T>(dst), ptr<T>(src));
    launch_layout<T>(n, vec, [&](auto v, unsigned grid) {
      constexpr int kV = decltype(v)::value;
      if (backward)
        pdl::launch(patches_to_image_kernel<T, kV>, grid, kThreads, 0, stream, ptr<T>(dst), ptr<T>(src), n, g);
      else
        pdl::launch(image_to_patches_kernel<T, kV>, grid, kThreads, 0, stream, ptr<T>(dst), ptr<T>(src), n, g);
    });
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void pixel_shuffle(Tensor& dst, const Tensor& src, int64_t side, int64_t cols, int64_t factor, bool backward) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const ShuffleGeometry g{side, side / factor, cols, factor, cols * factor * factor};
  DeviceGuard guard(dst.device());
  cudaStream_t stream = stream_of(dst.device());
  dispatch_float(dst.dtype(), backward ? "pixel_shuffle_backward" : "pixel_shuffle_forward", [&](auto tag) {
    using T = decltype(tag);
    const bool vec = cols % kVec16<T> == 0 && all_aligned16(ptr<T>(dst), ptr<T>(src));
    launch_layout<T>(n, vec, [&](auto v, unsigned grid) {
      constexpr int kV = decltype(v)::value;
      if (backward)
        pdl::launch(pixel_unshuffle_kernel<T, kV>, grid, kThreads, 0, stream, ptr<T>(dst), ptr<T>(src), n, g);
      else
        pdl::launch(pixel_shuffle_kernel<T, kV>, grid, kThreads, 0, stream, ptr<T>(dst), ptr<T>(src), n, g);
    });
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::ops::cuda
