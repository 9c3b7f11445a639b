// Checked vendor calls. VLM_CUDA_CHECK(cudaMemcpy(...)) aborts with the call, file:line, rank and the error name.
// Set VLM_CUDA_SYNC=1 to synchronize after every kernel launch checked with VLM_CUDA_CHECK_LAUNCH, which pins an
// asynchronous fault to the launch that caused it.
#pragma once

#ifdef VLM_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/status.h"

namespace vlm::detail {
bool cuda_sync_after_launch();
}

#define VLM_CUDA_CHECK(call)                                                                           \
  do {                                                                                                 \
    cudaError_t _vlm_err = (call);                                                                     \
    if (_vlm_err != cudaSuccess)                                                                       \
      ::vlm::detail::check_failed(__FILE__, __LINE__, #call,                                            \
                                  ::vlm::str(cudaGetErrorName(_vlm_err), ": ", cudaGetErrorString(_vlm_err))); \
  } while (0)

#define VLM_CUDA_CHECK_LAUNCH()                                                         \
  do {                                                                                  \
    VLM_CUDA_CHECK(cudaGetLastError());                                                 \
    if (::vlm::detail::cuda_sync_after_launch()) VLM_CUDA_CHECK(cudaDeviceSynchronize()); \
  } while (0)
#endif
