// The loss family's op boundary: cross entropy (forward, backward, both in one pass) and the decode step's picks
// (argmax_rows, gumbel_argmax_rows). Each op validates, then dispatches to cuda/loss.cu or the CPU reference in
// cpu/loss.cpp. The chunked LM-head loss built on it is in lm_head.cpp.
#include "kernels/ops.h"

#include <cmath>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops/check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops/check.h

namespace {
// logits [T, V] in the compute dtype (returned), targets i32 [T].
DType check_logits(const char* op, const char* name, const Tensor& logits, const Tensor& targets, Device dev) {
  const DType dt = compute_dtype(op, name, logits);
  check_tensor(op, name, logits, dt, dev);
  check_ndim(op, name, logits, 2);
  VLM_CHECK(logits.dim(1) > 0, "ops::", op, ": ", name, " is ", logits.describe(), ", expected a vocabulary > 0");
  check_i32_vector(op, "targets", targets, dev, logits.dim(0));
  return dt;
}
}  // namespace

void cross_entropy_forward(Tensor& losses, const Tensor& logits, const Tensor& targets, int ignore_index) {
  const char* op = "cross_entropy_forward";
  const Device dev = losses.device();
  check_logits(op, "logits", logits, targets, dev);
  check_like(op, "losses", losses, DType::f32, dev, Shape{logits.dim(0)});
  Tensor no_dlogits;
  VLM_DISPATCH_CUDA(dev, op, cuda::cross_entropy(losses, no_dlogits, logits, targets, 0.f, ignore_index));
  cpu::cross_entropy_forward(losses.data<float>(), logits.data<float>(), targets.data<int32_t>(), logits.dim(0),
                             logits.dim(1), ignore_index);
}

void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& targets, float dloss,
                            int ignore_index) {
  const char* op = "cross_entropy_backward";
  const Device dev = dlogits.device();
  const DType dt = check_logits(op, "logits", logits, targets, dev);
  check_like(op, "dlogits", dlogits, dt, dev, logits.shape());
  Tensor no_losses;
  VLM_DISPATCH_CUDA(dev, op, cuda::cross_entropy(no_losses, dlogits, logits, targets, dloss, ignore_index));
  cpu::cross_entropy_backward(dlogits.data<float>(), logits.data<float>(), targets.data<int32_t>(), dloss,
                              logits.dim(0), logits.dim(1), ignore_index);
}

void cross_entropy_forward_backward(Tensor& losses, Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                    float dloss, int ignore_index) {
  const char* op = "cross_entropy_forward_backward";
  const Device dev = dlogits.device();
  const DType dt = check_logits(op, "logits", logits, targets, dev);
  check_like(op, "dlogits", dlogits, dt, dev, logits.shape());
  check_like(op, "losses", losses, DType::f32, dev, Shape{logits.dim(0)});
  VLM_DISPATCH_CUDA(dev, op, cuda::cross_entropy(losses, dlogits, logits, targets, dloss, ignore_index));
  // The forward reads the logits before the backward overwrites them (dlogits may alias logits).
  cpu::cross_entropy_forward(losses.data<float>(), logits.data<float>(), targets.data<int32_t>(), logits.dim(0),
                             logits.dim(1), ignore_index);
  cpu::cross_entropy_backward(dlogits.data<float>(), logits.data<float>(), targets.data<int32_t>(), dloss,
                              logits.dim(0), logits.dim(1), ignore_index);
}

namespace {
// The picks' shared checks: logits [R, V] (f32 or bf16, 0 < V < 2^31) and ids i32 [R] on ids' device.
void check_pick(const char* op, const Tensor& ids, const Tensor& logits) {
  const Device dev = ids.device();
  compute_dtype(op, "logits", logits);
  check_tensor(op, "logits", logits, logits.dtype(), dev);
  check_ndim(op, "logits", logits, 2);
  VLM_CHECK(logits.dim(1) > 0 && logits.dim(1) < INT32_MAX, "ops::", op, ": logits is ", logits.describe(),
            ", expected a vocabulary in [1, 2^31)");
  check_i32_vector(op, "ids", ids, dev, logits.dim(0));
}
}  // namespace

void argmax_rows(Tensor& ids, const Tensor& logits, int32_t banned) {
  const char* op = "argmax_rows";
  const Device dev = ids.device();
  check_pick(op, ids, logits);
  VLM_DISPATCH_CUDA(dev, op, cuda::argmax_rows(ids, logits, banned));
  cpu::argmax_rows(ids.data<int32_t>(), logits.data<float>(), logits.dim(0), logits.dim(1), banned);
}

void gumbel_argmax_rows(Tensor& ids, const Tensor& logits, const Tensor& inv_temperature, const Tensor& keys,
                        int32_t banned) {
  const char* op = "gumbel_argmax_rows";
  const Device dev = ids.device();
  check_pick(op, ids, logits);
  const int64_t rows = logits.dim(0);
  check_like(op, "inv_temperature", inv_temperature, DType::f32, dev, Shape{rows});
  check_like(op, "keys", keys, DType::i64, dev, Shape{rows});
  VLM_DISPATCH_CUDA(dev, op, cuda::gumbel_argmax_rows(ids, logits, inv_temperature, keys, banned));
  const float* s = inv_temperature.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    VLM_CHECK(s[r] >= 0.f && std::isfinite(s[r]), "ops::", op, ": inv_temperature[", r, "] = ", s[r],
              ", expected finite and >= 0");
  cpu::gumbel_argmax_rows(ids.data<int32_t>(), logits.data<float>(), s, keys.data<int64_t>(), rows, logits.dim(1),
                          banned);
}

}  // namespace vlm::ops
