// The chunked LM-head loss (ops::lm_head_cross_entropy; tests/kernels/test_lm_head.cpp): a composition of ops
// (linear_forward, cross_entropy_forward[_backward], linear_backward) over row chunks, so it runs on every device the
// parts run on and the [T, V] logits never exist at once. One [chunk_rows, V] logits buffer in the compute dtype is
// reused by every chunk (on CUDA a scratch tensor on the current stream, so the chunks need no synchronization). On
// CUDA a bad target is recorded by the cross-entropy kernel with its position inside its chunk (see
// ops::check_index_errors).
#include "kernels/ops.h"

#include <algorithm>

#include "kernels/op_profile.h"
#include "kernels/ops/check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops/check.h

void lm_head_cross_entropy(Tensor& losses, Tensor& dhidden, Tensor& dw, const Tensor& hidden, const Tensor& w,
                           const Tensor& targets, float dloss, int ignore_index, int64_t chunk_rows) {
  const char* op = "lm_head_cross_entropy";
  const profile::ProfileScope scope("lm_head");  // the profile keys of the ops below: "lm_head/<op> <shape>"
  const Device dev = hidden.device();
  const DType dt = compute_dtype(op, "hidden", hidden);
  check_tensor(op, "hidden", hidden, dt, dev);
  check_ndim(op, "hidden", hidden, 2);
  check_tensor(op, "w", w, dt, dev);
  check_ndim(op, "w", w, 2);
  const int64_t rows = hidden.dim(0), cols = hidden.dim(1), vocab = w.dim(0);
  VLM_CHECK(w.dim(1) == cols && vocab > 0, "ops::", op, ": w is ", w.describe(), ", hidden is ", hidden.describe(),
            " (expected w [V > 0, C])");
  check_i32_vector(op, "targets", targets, dev, rows);
  check_like(op, "losses", losses, DType::f32, dev, Shape{rows});
  check_optional(op, "dhidden", dhidden, dt, dev, hidden.shape());
  check_optional(op, "dw", dw, DType::f32, dev, w.shape());
  VLM_CHECK(chunk_rows > 0, "ops::", op, ": chunk_rows is ", chunk_rows, ", expected > 0");
  if (rows == 0) return;
  if (dev.is_cpu()) {  // checked up front, so a bad target is named by its row in [0, T), not within its chunk
    const int32_t* y = targets.data<int32_t>();
    for (int64_t r = 0; r < rows; ++r)
      VLM_CHECK(y[r] == ignore_index || (y[r] >= 0 && y[r] < vocab), "ops::", op, ": targets[", r, "] = ", y[r],
                " is outside [0, ", vocab, ")");
  }
  const bool backward = dhidden.defined() || dw.defined();
  const int64_t chunk = std::min(chunk_rows, rows);
  Tensor logits_buffer = temporary(Shape{chunk, vocab}, dt, dev);
  const Tensor no_bias;
  Tensor no_db;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t r1 = std::min(rows, r0 + chunk);
    Tensor logits = logits_buffer.slice(0, 0, r1 - r0);
    const Tensor h = hidden.slice(0, r0, r1), t = targets.slice(0, r0, r1);
    Tensor loss = losses.slice(0, r0, r1);
    linear_forward(logits, h, w, no_bias);
    if (!backward) {
      cross_entropy_forward(loss, logits, t, ignore_index);
      continue;
    }
    cross_entropy_forward_backward(loss, logits, logits, t, dloss, ignore_index);  // logits now hold dlogits
    Tensor dh = dhidden.defined() ? dhidden.slice(0, r0, r1) : Tensor();
    linear_backward(dh, dw, no_db, logits, h, w);
  }
}

}  // namespace vlm::ops
