// Internal to vlm_flash: what the dispatcher knows about the compiled kernel families.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/flash/flash_api.h"

namespace vlm::flash {

// True when a portable kernel is compiled for this head dim (after padding) and element type.
bool flash_portable_supports(int head_dim, FlashDType dtype);

#if VLM_FLASH_HOPPER
// The sm_90a forward (wgmma + TMA): true when built for this problem's head dim / dtype and the device is sm_90.
bool flash_hopper_fwd_supports(const FlashFwdParams& p);
Status flash_hopper_fwd(const FlashFwdParams& p, cudaStream_t stream);
// The sm_90a backward (non-deterministic: dq added by TMA reduce-adds into an f32 accumulator, in no fixed order).
// dsum [Hq, total_q] and dq_accum [total_q, Hq, head_dim] f32 are the workspace of flash_bwd.
bool flash_hopper_bwd_supports(const FlashBwdParams& p);
Status flash_hopper_bwd(const FlashBwdParams& p, float* dsum, float* dq_accum, cudaStream_t stream);
#else
inline bool flash_hopper_fwd_supports(const FlashFwdParams&) { return false; }
inline Status flash_hopper_fwd(const FlashFwdParams&, cudaStream_t) {
  return unsupported("flash: built without the Hopper path");
}
inline bool flash_hopper_bwd_supports(const FlashBwdParams&) { return false; }
inline Status flash_hopper_bwd(const FlashBwdParams&, float*, float*, cudaStream_t) {
  return unsupported("flash: built without the Hopper path");
}
#endif

}  // namespace vlm::flash
