// The small-batch linear layers on CUDA: a GEMV for at most kGemvMaxRows rows (a decode step at small batch), with
// the neighbours of a transformer block's projections fused in: the RMSNorm before it, the bias, the residual add
// after it, or the SwiGLU of a packed gate/up projection. At one to eight rows a product is a pass over the weights,
// and cuBLASLt's GEMMs plus the separate norm, split and add kernels around them cost more in launches and
// round trips than the pass itself; this kernel is that one pass.
//
// Layout: one block of kWarps warps stages the call's x rows (normalized when a norm weight is given, then rounded to
// the compute dtype exactly as rmsnorm_forward would store them) in shared memory; each warp then owns output columns
// n = warp id, + total warps, ...: its lanes stream the weight row(s) in 16-byte vectors, kUnroll loads in flight per
// lane, multiply them with every x row in fp32 and reduce across the warp in a fixed order (results are
// deterministic). The epilogue adds bias and residual in fp32 and rounds once; with SwiGLU a warp reads gate row n and
// up row n + I, rounds each product to the compute dtype (as the GEMM would store the packed projection) and writes
// silu(gate) * up. The grid is capped at a few blocks per SM so that a wide output (the LM head) reuses each staged x.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemv_device.cuh"

namespace vlm::ops::cuda {

namespace {

using namespace gemv;  // NOLINT: the kernel and its launch are this file's use of the device functions

template <class T, class OutT, int kRows, int kMode>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const GemvParams p, const QkvOut o, const RopeFreq freq) {
  // The block's first weight rows (its warps' first columns) start towards L2 before the wait for the previous
  // kernel: they do not depend on it, and under PDL the fetch overlaps its tail.
  pdl::grid_begin_prefetch(static_cast<const T*>(p.w) + row_a<kMode>(p, o, first_col(p)) * p.in,
                           first_rows_bytes<T>(p),
                           static_cast<const T*>(p.w) + row_b<kMode>(p, o, first_col(p)) * p.in,
                           kMode != kPlain ? first_rows_bytes<T>(p) : 0);
  extern __shared__ uint4 staged_raw[];
  gemv_block<T, OutT, kRows, kMode>(p, o, freq, reinterpret_cast<T*>(staged_raw));
}

template <class T, class OutT, int kRows, int kMode>
void launch_rows(const GemvParams& p, const QkvOut& o, const RopeFreq& freq, int device, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(p.rows) * p.in * sizeof(T);
  const int64_t blocks = std::min<int64_t>(ceil_div(p.n, kWarps), int64_t{kBlocksPerSm} * multiprocessors(device));
  pdl::launch(gemv_kernel<T, OutT, kRows, kMode>, static_cast<unsigned>(std::max<int64_t>(blocks, 1)), kWarps * 32,
              smem, stream, p, o, freq);
}

template <class T, class OutT, int kMode>
void launch(const GemvParams& p, const QkvOut& o, const RopeFreq& freq, int device, cudaStream_t stream) {
  if (p.rows <= 1) return launch_rows<T, OutT, 1, kMode>(p, o, freq, device, stream);
  if (p.rows <= 2) return launch_rows<T, OutT, 2, kMode>(p, o, freq, device, stream);
  if (p.rows <= 4) return launch_rows<T, OutT, 4, kMode>(p, o, freq, device, stream);
  launch_rows<T, OutT, kGemvMaxRows, kMode>(p, o, freq, device, stream);
}

}  // namespace

bool gemv_forward(Tensor& y, const Tensor& x, const Tensor& norm_w, float eps, const Tensor& w, const Tensor& b,
                  const Tensor& residual, bool swiglu) {
  const DType dt = x.dtype();
  const int64_t in = w.dim(1), n = swiglu ? w.dim(0) / 2 : w.dim(0), rows = in > 0 ? x.numel() / in : 0;
  if (n < 1 || !gemv_fits(x, w, norm_w, rows)) return false;
  if (y.dtype() != dt && (y.dtype() != DType::f32 || swiglu || residual.defined())) return false;
  const GemvParams p = gemv_params(y, x, norm_w, eps, w, b, residual, rows, n);
  const Device dev = y.device();
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_of(dev);
  const QkvOut none{};
  const RopeFreq no_freq{};
  dispatch_float(dt, "gemv_forward", [&](auto tag) {
    using T = decltype(tag);
    if (swiglu)
      launch<T, T, kSwiglu>(p, none, no_freq, dev.index, stream);
    else if (y.dtype() == dt)
      launch<T, T, kPlain>(p, none, no_freq, dev.index, stream);
    else if constexpr (!std::is_same_v<T, float>)
      launch<T, float, kPlain>(p, none, no_freq, dev.index, stream);
  });
  VLM_CUDA_CHECK_LAUNCH();
  return true;
}

bool gemv_qkv_paged_write(Tensor& q, Tensor& k_cache, Tensor& v_cache, const Tensor& x, const Tensor& norm_w,
                          float eps, const Tensor& w, const Tensor& b, const Tensor& positions,
                          const Tensor& slot_mapping, float theta) {
  const int64_t rows = q.dim(0), heads_q = q.dim(1), dim = q.dim(2), heads_kv = k_cache.dim(2);
  if (dim / 2 > kMaxRopeHalf || !gemv_fits(x, w, norm_w, rows)) return false;
  const int64_t pairs = (heads_q + 2 * heads_kv) * (dim / 2);
  const GemvParams p = gemv_params(Tensor(), x, norm_w, eps, w, b, Tensor(), rows, pairs);
  const Device dev = q.device();
  const QkvOut o = qkv_out(q, k_cache, v_cache, positions, slot_mapping, theta);
  const RopeFreq freq = rope_freq(dim, theta);
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_of(dev);
  dispatch_float(x.dtype(), "rmsnorm_qkv_paged_write", [&](auto tag) {
    using T = decltype(tag);
    launch<T, T, kQkv>(p, o, freq, dev.index, stream);
  });
  VLM_CUDA_CHECK_LAUNCH();
  check_index_errors_now("rmsnorm_qkv_paged_write", dev);
  return true;
}

}  // namespace vlm::ops::cuda
