// Definitions of the portable launchers: grid shapes, shared-memory attributes, and the one runtime->template
// switch (causal; for the backward also atomic-vs-deterministic dq). Included only by the generated
// per-head-dim instantiation files.
#pragma once

#include <algorithm>

#include "core/cuda_check.h"
#include "kernels/cuda/flash/flash_bwd_kernel.cuh"
#include "kernels/cuda/flash/flash_fwd_kernel.cuh"
#include "kernels/cuda/flash/flash_launch.h"
#include "kernels/cuda/pdl.cuh"

namespace vlm::flash {

template <class Kernel>
void set_smem_limit(Kernel kernel, int bytes) {
  if (bytes > 48 * 1024) VLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <int kHeadDim, class Element>
void run_flash_fwd(const FlashFwdParams& p, cudaStream_t stream) {
  using Shape = FwdKernelShape<kHeadDim, Element>;
  if (p.batch == 0 || p.max_seqlen_q == 0) return;
  const dim3 grid((p.max_seqlen_q + Shape::kBlockM - 1) / Shape::kBlockM, p.n_heads_q, p.batch);
  auto kernel = p.causal ? flash_fwd_kernel<kHeadDim, Element, true> : flash_fwd_kernel<kHeadDim, Element, false>;
  set_smem_limit(kernel, Shape::kSmemBytes);
  pdl::launch(kernel, grid, Shape::kThreads, Shape::kSmemBytes, stream, p);
  VLM_CUDA_CHECK_LAUNCH();
}

template <int kHeadDim, class Element>
void run_flash_bwd(const FlashBwdParams& p, float* dsum, float* dq_accum, cudaStream_t stream) {
  using Shape = BwdKernelShape<kHeadDim, Element>;
  using DqShape = DqKernelShape<kHeadDim, Element>;
  if (p.batch == 0) return;
  const bool has_rows = p.max_seqlen_q > 0 && p.total_q > 0;
  if (p.deterministic && has_rows) {
    // dQ first: it computes D (rowsum(dO ∘ O)) into dsum for the dkdv kernel, so no rowsum kernel runs.
    const dim3 grid((p.max_seqlen_q + DqShape::kBlockM - 1) / DqShape::kBlockM, p.n_heads_q, p.batch);
    auto kernel = p.causal ? flash_bwd_dq_kernel<kHeadDim, Element, true> : flash_bwd_dq_kernel<kHeadDim, Element, false>;
    set_smem_limit(kernel, DqShape::kSmemBytes);
    pdl::launch(kernel, grid, DqShape::kThreads, DqShape::kSmemBytes, stream, p, dsum);
    VLM_CUDA_CHECK_LAUNCH();
  } else if (!p.deterministic && p.total_q > 0) {
    // D into dsum; the same launch zeroes the dQ accumulator.
    const int64_t rows = static_cast<int64_t>(p.total_q) * p.n_heads_q;
    pdl::launch(flash_bwd_dot_do_o_kernel<Element>, static_cast<unsigned>((rows + 31) / 32), 256, 0, stream, p, dsum,
                p.total_q, nullptr, dq_accum, kHeadDim);
    VLM_CUDA_CHECK_LAUNCH();
  }
  if (p.max_seqlen_k > 0) {
    const dim3 grid((p.max_seqlen_k + Shape::kBlockN - 1) / Shape::kBlockN, p.n_heads_kv, p.batch);
    auto kernel = p.deterministic
                      ? (p.causal ? flash_bwd_dkdv_kernel<kHeadDim, Element, true, false>
                                  : flash_bwd_dkdv_kernel<kHeadDim, Element, false, false>)
                      : (p.causal ? flash_bwd_dkdv_kernel<kHeadDim, Element, true, true>
                                  : flash_bwd_dkdv_kernel<kHeadDim, Element, false, true>);
    set_smem_limit(kernel, Shape::kSmemBytes);
    pdl::launch(kernel, grid, Shape::kThreads, Shape::kSmemBytes, stream, p, dq_accum, dsum);
    VLM_CUDA_CHECK_LAUNCH();
  }
  if (!p.deterministic && has_rows) launch_convert_dq<Element>(p, dq_accum, kHeadDim, stream);
}

}  // namespace vlm::flash
