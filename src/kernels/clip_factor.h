// The global-norm clipping factor of ops::AdamWParams::max_grad_norm, one definition for the CPU op (which reads the
// sum of squares on the host) and the CUDA AdamW kernel (which reads it on the device): computed in double and
// rounded to float once, as AdamW computed it on the host before the step moved onto the device.
#pragma once

#include <cmath>

#ifdef __CUDACC__
#define VLM_HOST_DEVICE __host__ __device__
#else
#define VLM_HOST_DEVICE
#endif

namespace vlm::ops {

// 1 when clipping is off (max_norm <= 0) or the norm sqrt(sum_of_squares) does not exceed max_norm; otherwise
// max_norm / (norm + 1e-6).
VLM_HOST_DEVICE inline float clip_factor(double sum_of_squares, float max_norm) {
  const double norm = sqrt(sum_of_squares);
  if (max_norm <= 0.f || !(norm > static_cast<double>(max_norm))) return 1.f;
  return static_cast<float>(static_cast<double>(max_norm) / (norm + 1e-6));
}

}  // namespace vlm::ops
