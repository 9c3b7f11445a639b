// The packed family's op boundary: the ops on packed projections, the QKV split (+ RoPE) of one
// [T, (Hq + 2 Hkv) * D] projection and SwiGLU on one [T, 2I] gate/up projection. Each op validates, then dispatches
// to cuda/packed.cu or the CPU reference in cpu/packed.cpp.
#include "kernels/ops.h"

#include <cmath>
#include <cstdint>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops/check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops/check.h

namespace {

// The tensors of one QKV split call: the packed projection and the three split tensors, named as the caller names
// them (qkv, q, k, v in the forward; dqkv, dq, dk, dv in the backward).
struct QkvTensors {
  const char* names[4];
  const Tensor* tensors[4];  // packed, q, k, v
};

// Validates a split call on `dev`: dtypes, shapes (q [T, Hq, D], k and v [T, Hkv, D], packed [T, (Hq + 2 Hkv) * D]),
// an even D, theta, positions and that no two of the tensors overlap.
void check_qkv_split(const char* op, const QkvTensors& t, const Tensor& positions, float theta, Device dev) {
  const Tensor &packed = *t.tensors[0], &q = *t.tensors[1], &k = *t.tensors[2], &v = *t.tensors[3];
  const DType dt = compute_dtype(op, t.names[1], q);
  for (int i = 0; i < 4; ++i) check_tensor(op, t.names[i], *t.tensors[i], dt, dev);
  check_ndim(op, t.names[1], q, 3);
  check_ndim(op, t.names[2], k, 3);
  const int64_t tokens = q.dim(0), heads_q = q.dim(1), head_dim = q.dim(2), heads_kv = k.dim(1);
  check_shape(op, t.names[2], k, Shape{tokens, heads_kv, head_dim});
  check_shape(op, t.names[3], v, k.shape());
  VLM_CHECK(head_dim % 2 == 0, "ops::", op, ": ", t.names[1], " is ", q.describe(), ", head dim must be even");
  check_shape(op, t.names[0], packed, Shape{tokens, (heads_q + 2 * heads_kv) * head_dim});
  VLM_CHECK(std::isfinite(theta) && theta >= 0.f, "ops::", op, ": theta is ", theta,
            ", expected > 0 (RoPE) or 0 (no rotation)");
  if (theta > 0.f || positions.defined()) check_i32_vector(op, "positions", positions, dev, tokens);
  for (int i = 1; i < 4; ++i) {
    check_disjoint(op, t.names[i], *t.tensors[i], t.names[0], packed);
    for (int j = i + 1; j < 4; ++j) check_disjoint(op, t.names[i], *t.tensors[i], t.names[j], *t.tensors[j]);
  }
}

const int32_t* positions_or_null(const Tensor& positions, float theta) {
  return theta > 0.f ? positions.data<int32_t>() : nullptr;
}

// gu [..., 2I] in the compute dtype `dt` for an activation `like` [..., I] (y or dy).
void check_swiglu_packed(const char* op, const char* like_name, const Tensor& like, const Tensor& gu, DType dt,
                         Device dev) {
  check_tensor(op, like_name, like, dt, dev);
  VLM_CHECK(like.ndim() >= 1, "ops::", op, ": ", like_name, " is ", like.describe(), ", expected [T, I]");
  check_like(op, "gu", gu, dt, dev, with_last_dim(like, 2 * like.dim(-1)));
}

}  // namespace

void qkv_split_forward(Tensor& q, Tensor& k, Tensor& v, const Tensor& qkv, const Tensor& positions, float theta) {
  const char* op = "qkv_split_forward";
  check_qkv_split(op, {{"qkv", "q", "k", "v"}, {&qkv, &q, &k, &v}}, positions, theta, q.device());
  VLM_PROFILE_TAG(q.dim(0), "x", q.dim(1), "+2x", k.dim(1), "x", q.dim(2));
  VLM_DISPATCH_CUDA(q.device(), op, cuda::qkv_split_forward(q, k, v, qkv, positions, theta));
  cpu::qkv_split_forward(q.data<float>(), k.data<float>(), v.data<float>(), qkv.data<float>(),
                         positions_or_null(positions, theta), q.dim(0), q.dim(1), k.dim(1), q.dim(2), theta);
}

void qkv_split_backward(Tensor& dqkv, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& positions,
                        float theta) {
  const char* op = "qkv_split_backward";
  check_qkv_split(op, {{"dqkv", "dq", "dk", "dv"}, {&dqkv, &dq, &dk, &dv}}, positions, theta, dqkv.device());
  VLM_PROFILE_TAG(dq.dim(0), "x", dq.dim(1), "+2x", dk.dim(1), "x", dq.dim(2));
  VLM_DISPATCH_CUDA(dqkv.device(), op, cuda::qkv_split_backward(dqkv, dq, dk, dv, positions, theta));
  cpu::qkv_split_backward(dqkv.data<float>(), dq.data<float>(), dk.data<float>(), dv.data<float>(),
                          positions_or_null(positions, theta), dq.dim(0), dq.dim(1), dk.dim(1), dq.dim(2), theta);
}

void swiglu_packed_forward(Tensor& y, const Tensor& gu) {
  const char* op = "swiglu_packed_forward";
  const Device dev = y.device();
  check_swiglu_packed(op, "y", y, gu, compute_dtype(op, "y", y), dev);
  check_disjoint(op, "y", y, "gu", gu);
  VLM_PROFILE_TAG(leading_rows(y), "x", y.dim(-1));
  VLM_DISPATCH_CUDA(dev, op, cuda::swiglu_packed_forward(y, gu));
  cpu::swiglu_packed_forward(y.data<float>(), gu.data<float>(), leading_rows(y), y.dim(-1));
}

void swiglu_packed_backward(Tensor& dgu, const Tensor& dy, const Tensor& gu) {
  const char* op = "swiglu_packed_backward";
  const Device dev = dgu.device();
  const DType dt = compute_dtype(op, "dy", dy);
  check_swiglu_packed(op, "dy", dy, gu, dt, dev);
  check_like(op, "dgu", dgu, dt, dev, gu.shape());
  check_disjoint(op, "dgu", dgu, "dy", dy);
  VLM_CHECK(dgu.raw_data() == gu.raw_data() || !overlaps(dgu, gu), "ops::", op,
            ": dgu overlaps gu (only dgu == gu, in place, is allowed)");
  VLM_PROFILE_TAG(leading_rows(dy), "x", dy.dim(-1));
  VLM_DISPATCH_CUDA(dev, op, cuda::swiglu_packed_backward(dgu, dy, gu));
  cpu::swiglu_packed_backward(dgu.data<float>(), dy.data<float>(), gu.data<float>(), leading_rows(dy), dy.dim(-1));
}

}  // namespace vlm::ops
