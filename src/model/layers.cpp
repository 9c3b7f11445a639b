// Linear, norms and self-attention forward/backward on top of kernels/ops.h.
#include "model/layers.h"

#include <cmath>

#include "kernels/ops.h"

namespace vlm {

Tensor new_like(const Shape& shape, const Tensor& like) { return Tensor::empty(shape, like.dtype(), like.device()); }
Tensor new_f32_like(const Shape& shape, const Tensor& like) {
  return Tensor::empty(shape, DType::f32, like.device());
}

namespace {
// The gradient slot of a parameter, or an undefined tensor when it is frozen (ops then skip it).
Tensor grad_of(const Param* p) { return (p && p->trainable) ? p->grad : Tensor(); }
}  // namespace

Linear Linear::create(ParameterStore& store, const std::string& prefix, ParamGroup group, int in, int out, bool bias,
                      Device device) {
  Linear l;
  l.w = store.add(prefix + ".weight", group, {out, in}, true, device);
  if (bias) l.b = store.add(prefix + ".bias", group, {out}, false, device);
  return l;
}

Tensor Linear::forward(const Tensor& x) const {
  Tensor y = new_like({x.dim(0), w->value.dim(0)}, x);
  ops::linear_forward(y, x, w->weight(), b ? b->weight() : Tensor());
  return y;
}

Tensor Linear::backward(const Tensor& dy, const Tensor& x, bool need_dx) const {
  Tensor dx = need_dx ? new_like({x.dim(0), w->value.dim(1)}, x) : Tensor();
  Tensor dw = grad_of(w), db = grad_of(b);
  ops::linear_backward(dx, dw, db, dy, x, w->weight());
  return dx;
}

LayerNorm LayerNorm::create(ParameterStore& store, const std::string& prefix, ParamGroup group, int dim, float eps,
                            Device device) {
  LayerNorm n;
  n.w = store.add(prefix + ".weight", group, {dim}, false, device);
  n.b = store.add(prefix + ".bias", group, {dim}, false, device);
  n.eps = eps;
  return n;
}

Tensor LayerNorm::forward(const Tensor& x, Saved& saved) const {
  Tensor y = new_like(x.shape(), x);
  saved.mean = new_f32_like({x.dim(0)}, x);
  saved.rstd = new_f32_like({x.dim(0)}, x);
  ops::layernorm_forward(y, saved.mean, saved.rstd, x, w->weight(), b->weight(), eps);
  return y;
}

Tensor LayerNorm::backward(const Tensor& dy, const Tensor& x, const Saved& saved) const {
  Tensor dx = new_like(x.shape(), x);
  Tensor dw = grad_of(w), db = grad_of(b);
  ops::layernorm_backward(dx, dw, db, dy, x, w->weight(), saved.mean, saved.rstd);
  return dx;
}

RMSNorm RMSNorm::create(ParameterStore& store, const std::string& prefix, ParamGroup group, int dim, float eps,
                        Device device) {
  RMSNorm n;
  n.w = store.add(prefix + ".weight", group, {dim}, false, device);
  n.eps = eps;
  return n;
}

Tensor RMSNorm::forward(const Tensor& x, Saved& saved) const {
  Tensor y = new_like(x.shape(), x);
  saved.rstd = new_f32_like({x.dim(0)}, x);
  ops::rmsnorm_forward(y, saved.rstd, x, w->weight(), eps);
  return y;
}

Tensor RMSNorm::backward(const Tensor& dy, const Tensor& x, const Saved& saved) const {
  Tensor dx = new_like(x.shape(), x);
  Tensor dw = grad_of(w);
  ops::rmsnorm_backward(dx, dw, dy, x, w->weight(), saved.rstd);
  return dx;
}

SelfAttention SelfAttention::create(ParameterStore& store, const std::string& prefix, const std::string& out_name,
                                    ParamGroup group, int hidden, const AttentionShape& shape, bool qkv_bias,
                                    bool out_bias, Device device) {
  SelfAttention a;
  a.shape = shape;
  a.q = Linear::create(store, prefix + ".q_proj", group, hidden, shape.heads * shape.head_dim, qkv_bias, device);
  a.k = Linear::create(store, prefix + ".k_proj", group, hidden, shape.kv_heads * shape.head_dim, qkv_bias, device);
  a.v = Linear::create(store, prefix + ".v_proj", group, hidden, shape.kv_heads * shape.head_dim, qkv_bias, device);
  a.o = Linear::create(store, prefix + "." + out_name, group, shape.heads * shape.head_dim, hidden, out_bias, device);
  return a;
}

Tensor SelfAttention::forward(const Tensor& x, const SeqInfo& seq, Saved& s) const {
  const int64_t T = x.dim(0);
  const int H = shape.heads, Hkv = shape.kv_heads, D = shape.head_dim;
  s.q = q.forward(x).view({T, H, D});
  s.k = k.forward(x).view({T, Hkv, D});
  s.v = v.forward(x).view({T, Hkv, D});
  if (shape.rope) {
    ops::rope_forward(s.q, seq.positions, shape.rope_theta);
    ops::rope_forward(s.k, seq.positions, shape.rope_theta);
  }
  s.out = new_like({T, H, D}, x);
  s.lse = new_f32_like({H, T}, x);
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  ops::attention_forward(s.out, s.lse, s.q, s.k, s.v, seq.cu_seqlens, seq.cu_seqlens, seq.max_seqlen, seq.max_seqlen,
                         scale, shape.causal);
  return o.forward(s.out.view({T, H * D}));
}

Tensor SelfAttention::backward(const Tensor& dy, const Tensor& x, const SeqInfo& seq, const Saved& s) const {
  const int64_t T = x.dim(0);
  const int H = shape.heads, Hkv = shape.kv_heads, D = shape.head_dim;
  Tensor d_out = o.backward(dy, s.out.view({T, H * D}), true).view({T, H, D});
  Tensor dq = new_like({T, H, D}, x), dk = new_like({T, Hkv, D}, x), dv = new_like({T, Hkv, D}, x);
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  ops::attention_backward(dq, dk, dv, d_out, s.q, s.k, s.v, s.out, s.lse, seq.cu_seqlens, seq.cu_seqlens,
                          seq.max_seqlen, seq.max_seqlen, scale, shape.causal);
  if (shape.rope) {
    ops::rope_backward(dq, seq.positions, shape.rope_theta);
    ops::rope_backward(dk, seq.positions, shape.rope_theta);
  }
  Tensor dx = q.backward(dq.view({T, H * D}), x, true);
  ops::add_inplace(dx, k.backward(dk.view({T, Hkv * D}), x, true));
  ops::add_inplace(dx, v.backward(dv.view({T, Hkv * D}), x, true));
  return dx;
}

}  // namespace vlm
