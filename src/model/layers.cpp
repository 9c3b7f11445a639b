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

Tensor Linear::forward_add(const Tensor& x, const Tensor& residual) const {
  Tensor y = new_like({x.dim(0), w->value.dim(0)}, x);
  ops::linear_add_forward(y, x, w->weight(), b ? b->weight() : Tensor(), residual);
  return y;
}

Tensor Linear::backward(const Tensor& dy, const Tensor& x, bool need_dx) const {
  Tensor dx = need_dx ? new_like({x.dim(0), w->value.dim(1)}, x) : Tensor();
  Tensor dw = grad_of(w), db = grad_of(b);
  ops::linear_backward(dx, dw, db, dy, x, w->weight());
  return dx;
}

PackedLinear PackedLinear::create(ParameterStore& store, const std::vector<std::string>& prefixes, ParamGroup group,
                                  int in, const std::vector<int>& outs, bool bias, Device device) {
  VLM_CHECK(!prefixes.empty() && prefixes.size() == outs.size(), "PackedLinear: ", prefixes.size(), " names for ",
            outs.size(), " output sizes");
  std::vector<PackPart> parts;
  PackedLinear l;
  l.in = in;
  for (size_t i = 0; i < prefixes.size(); ++i) {
    parts.push_back({prefixes[i] + ".weight", Shape{outs[i], in}, true, 0});
    if (bias) parts.push_back({prefixes[i] + ".bias", Shape{outs[i]}, false, 1});
    l.out += outs[i];
  }
  const std::vector<ParamPack*> packs = store.add_packed(parts, bias ? 2 : 1, group, device);
  l.w = packs[0];
  l.b = bias ? packs[1] : nullptr;
  return l;
}

namespace {
// The gradient buffer of a pack, or an undefined tensor when its parts are frozen (freezing is per model part, so
// the parts of one pack agree).
Tensor pack_grad(const ParamPack* pack) {
  if (pack == nullptr) return Tensor();
  const bool trainable = pack->parts.front()->trainable;
  for (const Param* p : pack->parts)
    VLM_CHECK(p->trainable == trainable, "parameter '", p->name, "' is ", p->trainable ? "trainable" : "frozen",
              " but '", pack->parts.front()->name, "' of the same packed projection is not");
  return trainable ? pack->grad : Tensor();
}
}  // namespace

Tensor PackedLinear::forward(const Tensor& x) const {
  Tensor y = new_like({x.dim(0), out}, x);
  ops::linear_forward(y, x, w->weight().view({out, in}), b ? b->weight() : Tensor());
  return y;
}

Tensor PackedLinear::backward(const Tensor& dy, const Tensor& x, bool need_dx) const {
  Tensor dx = need_dx ? new_like({x.dim(0), in}, x) : Tensor();
  Tensor dw = pack_grad(w), db = pack_grad(b);
  if (dw.defined()) dw = dw.view({out, in});
  ops::linear_backward(dx, dw, db, dy, x, w->weight().view({out, in}));
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

Tensor LayerNorm::forward_add(Tensor& h, const Tensor& x, const Tensor& residual, Saved& saved) const {
  h = new_like(x.shape(), x);
  Tensor y = new_like(x.shape(), x);
  saved.mean = new_f32_like({x.dim(0)}, x);
  saved.rstd = new_f32_like({x.dim(0)}, x);
  ops::add_layernorm_forward(h, y, saved.mean, saved.rstd, x, residual, w->weight(), b->weight(), eps);
  return y;
}

Tensor LayerNorm::backward_add(const Tensor& dy, const Tensor& dh_next, const Tensor& h, const Saved& saved) const {
  Tensor dh = new_like(h.shape(), h);
  Tensor dw = grad_of(w), db = grad_of(b);
  ops::add_layernorm_backward(dh, dw, db, dy, dh_next, h, w->weight(), saved.mean, saved.rstd);
  return dh;
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

Tensor RMSNorm::forward_add(Tensor& h, const Tensor& x, const Tensor& residual, Saved& saved) const {
  h = new_like(x.shape(), x);
  Tensor y = new_like(x.shape(), x);
  saved.rstd = new_f32_like({x.dim(0)}, x);
  ops::add_rmsnorm_forward(h, y, saved.rstd, x, residual, w->weight(), eps);
  return y;
}

Tensor RMSNorm::backward_add(const Tensor& dy, const Tensor& dh_next, const Tensor& h, const Saved& saved) const {
  Tensor dh = new_like(h.shape(), h);
  Tensor dw = grad_of(w);
  ops::add_rmsnorm_backward(dh, dw, dy, dh_next, h, w->weight(), saved.rstd);
  return dh;
}

SelfAttention SelfAttention::create(ParameterStore& store, const std::string& prefix, const std::string& out_name,
                                    ParamGroup group, int hidden, const AttentionShape& shape, bool qkv_bias,
                                    bool out_bias, Device device) {
  SelfAttention a;
  a.shape = shape;
  const int q_out = shape.heads * shape.head_dim, kv_out = shape.kv_heads * shape.head_dim;
  a.qkv = PackedLinear::create(store, {prefix + ".q_proj", prefix + ".k_proj", prefix + ".v_proj"}, group, hidden,
                               {q_out, kv_out, kv_out}, qkv_bias, device);
  a.o = Linear::create(store, prefix + "." + out_name, group, shape.heads * shape.head_dim, hidden, out_bias, device);
  return a;
}

SeqInfo checked_seq_info(SeqInfo seq, int64_t rows) {
  ops::check_cu_seqlens(seq.cu_seqlens, rows, seq.max_seqlen);
  seq.cu_seqlens_checked = true;
  return seq;
}

bool SelfAttention::reads_packed_qkv(const Tensor& x) const { return x.device().is_cuda(); }

Tensor SelfAttention::forward(const Tensor& x, const SeqInfo& seq, Saved& s) const {
  const int64_t T = x.dim(0);
  const int H = shape.heads, Hkv = shape.kv_heads, D = shape.head_dim;
  const Tensor qkv_out = qkv.forward(x);  // [T, (H + 2 Hkv) D]
  if (reads_packed_qkv(x)) {  // attention reads q, k, v where the projection wrote them
    const Tensor heads = qkv_out.view({T, H + 2 * Hkv, D});
    s.q = heads.slice(1, 0, H);
    s.k = heads.slice(1, H, H + Hkv);
    s.v = heads.slice(1, H + Hkv, H + 2 * Hkv);
    if (shape.rope) {  // q and k, adjacent in the packed layout, rotated in one pass
      Tensor qk = heads.slice(1, 0, H + Hkv);
      ops::rope_forward(qk, seq.positions, shape.rope_theta);
    }
  } else {
    s.q = new_like({T, H, D}, x);
    s.k = new_like({T, Hkv, D}, x);
    s.v = new_like({T, Hkv, D}, x);
    ops::qkv_split_forward(s.q, s.k, s.v, qkv_out, shape.rope ? seq.positions : Tensor(),
                           shape.rope ? shape.rope_theta : 0.f);
  }
  s.out = new_like({T, H, D}, x);
  s.lse = new_f32_like({H, T}, x);
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  ops::attention_forward(s.out, s.lse, s.q, s.k, s.v, seq.cu_seqlens, seq.cu_seqlens, seq.max_seqlen, seq.max_seqlen,
                         scale, shape.causal, seq.cu_seqlens_checked);
  return o.forward(s.out.view({T, H * D}));
}

Tensor SelfAttention::backward(const Tensor& dy, const Tensor& x, const SeqInfo& seq, const Saved& s) const {
  const int64_t T = x.dim(0);
  const int H = shape.heads, Hkv = shape.kv_heads, D = shape.head_dim;
  Tensor d_out = o.backward(dy, s.out.view({T, H * D}), true).view({T, H, D});
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  Tensor dqkv = new_like({T, qkv.out}, x);
  if (reads_packed_qkv(x)) {  // the gradients land in the packed layout directly
    const Tensor heads = dqkv.view({T, H + 2 * Hkv, D});
    Tensor dq = heads.slice(1, 0, H), dk = heads.slice(1, H, H + Hkv), dv = heads.slice(1, H + Hkv, H + 2 * Hkv);
    ops::attention_backward(dq, dk, dv, d_out, s.q, s.k, s.v, s.out, s.lse, seq.cu_seqlens, seq.cu_seqlens,
                            seq.max_seqlen, seq.max_seqlen, scale, shape.causal, seq.cu_seqlens_checked);
    if (shape.rope) {
      Tensor dqk = heads.slice(1, 0, H + Hkv);
      ops::rope_backward(dqk, seq.positions, shape.rope_theta);
    }
  } else {
    Tensor dq = new_like({T, H, D}, x), dk = new_like({T, Hkv, D}, x), dv = new_like({T, Hkv, D}, x);
    ops::attention_backward(dq, dk, dv, d_out, s.q, s.k, s.v, s.out, s.lse, seq.cu_seqlens, seq.cu_seqlens,
                            seq.max_seqlen, seq.max_seqlen, scale, shape.causal, seq.cu_seqlens_checked);
    ops::qkv_split_backward(dqkv, dq, dk, dv, shape.rope ? seq.positions : Tensor(),
                            shape.rope ? shape.rope_theta : 0.f);
  }
  return qkv.backward(dqkv, x, true);
}

}  // namespace vlm
