// What the two AdamW kernels (cpu/optimizer.cpp, cuda/optimizer.cu) share: the scalars of one step, filled in one
// place, the op boundary (ops/optimizer.cpp), from ops::AdamWSettings and the step; and the global-norm clipping
// factor, one definition for the CPU kernel (which reads the sum of squares on the host) and the CUDA kernel (which
// reads it on the device), so both scale the gradients by the same float.
#pragma once

#include <cmath>

#ifdef __CUDACC__
#define VLM_HOST_DEVICE __host__ __device__
#else
#define VLM_HOST_DEVICE
#endif

namespace vlm::ops {

// One AdamW step's scalars, plain data: the CUDA kernel takes them by value.
struct AdamWScalars {
  float lr, beta1, beta2, eps, weight_decay;
  float grad_scale;        // grads are multiplied by this first
  float bias_correction1;  // 1 - beta1^step, computed in double and rounded once
  float bias_correction2;  // 1 - beta2^step
  // When grad_sum_of_squares is set (memory on the tensors' device), grads are also multiplied by
  // clip_factor(*grad_sum_of_squares, max_grad_norm).
  float max_grad_norm = 0.f;
  const double* grad_sum_of_squares = nullptr;
};

// 1 when clipping is off (max_norm <= 0) or the norm sqrt(sum_of_squares) does not exceed max_norm; otherwise
// max_norm / (norm + 1e-6), computed in double and rounded to float once.
VLM_HOST_DEVICE inline float clip_factor(double sum_of_squares, float max_norm) {
  const double norm = sqrt(sum_of_squares);
  if (max_norm <= 0.f || !(norm > static_cast<double>(max_norm))) return 1.f;
  return static_cast<float>(static_cast<double>(max_norm) / (norm + 1e-6));
}

}  // namespace vlm::ops
