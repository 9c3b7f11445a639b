// The op boundary, part 2 (see ops.cpp for part 1): attention, the loss, embeddings and row/layout movement, the
// optimizer and the index-error check. Same pattern: validate (aborting with the op and tensor named), then the one
// VLM_DISPATCH_CUDA line, then the CPU reference.
#include <cmath>
#include <cstring>

#include "kernels/clip_factor.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"
#include "kernels/ops_check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops_check.h

// ---- attention ---------------------------------------------------------------------------------------------

namespace {
void check_rows_like(const char* op, const char* name, const Tensor& t, DType dt, Device dev, const Shape& shape) {
  check_rows(op, name, t, dt, dev);
  check_shape(op, name, t, shape);
}

// Validates the inputs shared by forward and backward (q, k, v in the compute dtype `dt`) and fills the params.
cpu::AttentionParams check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& cu_q, const Tensor& cu_k, int max_seqlen_q, int max_seqlen_k,
                                     float scale, bool causal, DType dt, Device dev) {
  check_rows(op, "q", q, dt, dev);
  check_rows(op, "k", k, dt, dev);
  check_ndim(op, "q", q, 3);
  check_ndim(op, "k", k, 3);
  check_rows_like(op, "v", v, dt, dev, k.shape());
  const int64_t heads_q = q.dim(1), heads_kv = k.dim(1), dim = q.dim(2);
  VLM_CHECK(k.dim(2) == dim && dim > 0, "ops::", op, ": q is ", q.describe(), ", k is ", k.describe(),
            " (head dims must match and be > 0)");
  VLM_CHECK(heads_kv > 0 && heads_q % heads_kv == 0, "ops::", op, ": q is ", q.describe(), ", k is ", k.describe(),
            " (q heads must be a multiple of kv heads)");
  check_tensor(op, "cu_seqlens_q", cu_q, DType::i32, dev);
  check_tensor(op, "cu_seqlens_k", cu_k, DType::i32, dev);
  check_ndim(op, "cu_seqlens_q", cu_q, 1);
  VLM_CHECK(cu_q.dim(0) >= 1, "ops::", op, ": cu_seqlens_q is ", cu_q.describe(), ", expected [B + 1]");
  check_shape(op, "cu_seqlens_k", cu_k, cu_q.shape());
  VLM_CHECK(max_seqlen_q >= 0 && max_seqlen_k >= 0, "ops::", op, ": negative max_seqlen (", max_seqlen_q, ", ",
            max_seqlen_k, ")");
  cpu::AttentionParams p;
  p.batch = cu_q.dim(0) - 1;
  p.tokens_q = q.dim(0);
  p.tokens_k = k.dim(0);
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim = dim;
  p.max_seqlen_q = max_seqlen_q;
  p.max_seqlen_k = max_seqlen_k;
  p.scale = scale;
  p.causal = causal;
  if (dev.is_cpu()) {  // host pointers only; the cu_seqlens values are checked by the CPU op (on CUDA, on device)
    p.q = q.data<float>();
    p.k = k.data<float>();
    p.v = v.data<float>();
    p.cu_seqlens_q = cu_q.data<int32_t>();
    p.cu_seqlens_k = cu_k.data<int32_t>();
  }
  return p;
}
}  // namespace

void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k, int max_seqlen_q, int max_seqlen_k,
                       float scale, bool causal, bool cu_seqlens_checked) {
  const char* op = "attention_forward";
  const Device dev = out.device();
  const DType dt = compute_dtype(op, "q", q);
  const cpu::AttentionParams p = check_attention(op, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                 scale, causal, dt, dev);
  check_like(op, "out", out, dt, dev, q.shape());
  check_like(op, "lse", lse, DType::f32, dev, Shape{p.heads_q, p.tokens_q});
  VLM_PROFILE_TAG(p.tokens_q, " h", p.heads_q, "/", p.heads_kv, " d", p.head_dim, " s", max_seqlen_q);
  VLM_DISPATCH_CUDA(dev, op,
                    cuda::attention_forward(out, lse, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                            scale, causal, cu_seqlens_checked));
  cpu::attention_forward(out.data<float>(), lse.data<float>(), p);
}

void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& cu_seqlens_q,
                        const Tensor& cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, float scale, bool causal,
                        bool cu_seqlens_checked) {
  const char* op = "attention_backward";
  const Device dev = dout.device();
  const DType dt = compute_dtype(op, "dout", dout);
  const cpu::AttentionParams p = check_attention(op, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                 scale, causal, dt, dev);
  check_like(op, "dout", dout, dt, dev, q.shape());
  check_like(op, "out", out, dt, dev, q.shape());
  check_like(op, "lse", lse, DType::f32, dev, Shape{p.heads_q, p.tokens_q});
  if (dq.defined()) check_rows_like(op, "dq", dq, dt, dev, q.shape());
  if (dk.defined()) check_rows_like(op, "dk", dk, dt, dev, k.shape());
  if (dv.defined()) check_rows_like(op, "dv", dv, dt, dev, k.shape());
  VLM_PROFILE_TAG(p.tokens_q, " h", p.heads_q, "/", p.heads_kv, " d", p.head_dim, " s", max_seqlen_q);
  VLM_DISPATCH_CUDA(dev, op,
                    cuda::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k,
                                             max_seqlen_q, max_seqlen_k, scale, causal, cu_seqlens_checked));
  cpu::attention_backward(f32_or_null(dq), f32_or_null(dk), f32_or_null(dv), dout.data<float>(), out.data<float>(),
                          lse.data<float>(), p);
}

void check_cu_seqlens(const Tensor& cu_seqlens, int64_t rows, int max_seqlen) {
  const char* op = "check_cu_seqlens";
  const Device dev = cu_seqlens.device();
  check_tensor(op, "cu_seqlens", cu_seqlens, DType::i32, dev);
  check_ndim(op, "cu_seqlens", cu_seqlens, 1);
  VLM_CHECK(cu_seqlens.dim(0) >= 1, "ops::", op, ": cu_seqlens is ", cu_seqlens.describe(), ", expected [B + 1]");
  VLM_CHECK(rows >= 0 && max_seqlen >= 0, "ops::", op, ": negative rows (", rows, ") or max_seqlen (", max_seqlen, ")");
  VLM_DISPATCH_CUDA(dev, op, cuda::check_cu_seqlens(cu_seqlens, rows, max_seqlen));
  cpu::check_cu_seqlens(op, "cu_seqlens", cu_seqlens.data<int32_t>(), cu_seqlens.dim(0) - 1, rows, max_seqlen);
}

// ---- loss --------------------------------------------------------------------------------------------------

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

// ---- embeddings and data movement --------------------------------------------------------------------------

namespace {
// table-like [R, C] (`table_dtype`) and rows-like [N, C] (the compute dtype) with an i32 index [N].
void check_rows_pair(const char* op, const char* table_name, const Tensor& table, DType table_dtype,
                     const char* rows_name, const Tensor& rows, const char* index_name, const Tensor& index,
                     Device dev) {
  check_tensor(op, table_name, table, table_dtype, dev);
  check_tensor(op, rows_name, rows, compute_dtype(op, rows_name, rows), dev);
  check_ndim(op, table_name, table, 2);
  check_ndim(op, rows_name, rows, 2);
  VLM_CHECK(table.dim(1) == rows.dim(1), "ops::", op, ": ", table_name, " is ", table.describe(), " but ", rows_name,
            " is ", rows.describe(), " (row widths differ)");
  check_i32_vector(op, index_name, index, dev, rows.dim(0));
}
}  // namespace

void embedding_forward(Tensor& out, const Tensor& table, const Tensor& ids) {
  const char* op = "embedding_forward";
  check_rows_pair(op, "table", table, compute_dtype(op, "out", out), "out", out, "ids", ids, out.device());
  VLM_DISPATCH_CUDA(out.device(), op, cuda::embedding_forward(out, table, ids));
  cpu::embedding_forward(out.data<float>(), table.data<float>(), ids.data<int32_t>(), out.dim(0), table.dim(0),
                         table.dim(1));
}

void embedding_backward(Tensor& dtable, const Tensor& dout, const Tensor& ids) {
  const char* op = "embedding_backward";
  check_rows_pair(op, "dtable", dtable, DType::f32, "dout", dout, "ids", ids, dtable.device());
  VLM_DISPATCH_CUDA(dtable.device(), op, cuda::embedding_backward(dtable, dout, ids));
  cpu::embedding_backward(dtable.data<float>(), dout.data<float>(), ids.data<int32_t>(), dout.dim(0), dtable.dim(0),
                          dtable.dim(1));
}

void scatter_rows(Tensor& out, const Tensor& src, const Tensor& index) {
  const char* op = "scatter_rows";
  check_rows_pair(op, "out", out, compute_dtype(op, "src", src), "src", src, "index", index, out.device());
  VLM_DISPATCH_CUDA(out.device(), op, cuda::scatter_rows(out, src, index));
  cpu::scatter_rows(out.data<float>(), src.data<float>(), index.data<int32_t>(), src.dim(0), out.dim(0), out.dim(1));
}

void gather_rows(Tensor& out, const Tensor& src, const Tensor& index) {
  const char* op = "gather_rows";
  check_rows_pair(op, "src", src, compute_dtype(op, "out", out), "out", out, "index", index, out.device());
  VLM_DISPATCH_CUDA(out.device(), op, cuda::gather_rows(out, src, index));
  cpu::gather_rows(out.data<float>(), src.data<float>(), index.data<int32_t>(), out.dim(0), src.dim(0), src.dim(1));
}

namespace {
// images [B, C, H, W] and patches, both in the compute dtype of images; aborts on mismatch.
void check_patches(const char* op, const char* images_name, const Tensor& images, const char* patches_name,
                   const Tensor& patches, int patch, Device dev) {
  const DType dt = compute_dtype(op, images_name, images);
  check_tensor(op, images_name, images, dt, dev);
  check_ndim(op, images_name, images, 4);
  VLM_CHECK(patch > 0 && images.dim(2) % patch == 0 && images.dim(3) % patch == 0, "ops::", op, ": ", images_name,
            " is ", images.describe(), ", not divisible into ", patch, "x", patch, " patches");
  const int64_t b = images.dim(0), c = images.dim(1), gh = images.dim(2) / patch, gw = images.dim(3) / patch;
  check_like(op, patches_name, patches, dt, dev, Shape{b * gh * gw, c * patch * patch});
}
}  // namespace

void image_to_patches(Tensor& patches, const Tensor& images, int patch) {
  const char* op = "image_to_patches";
  check_patches(op, "images", images, "patches", patches, patch, patches.device());
  VLM_DISPATCH_CUDA(patches.device(), op,
                    cuda::image_to_patches(patches, images, images.dim(1), images.dim(2), images.dim(3), patch, false));
  cpu::image_to_patches(patches.data<float>(), images.data<float>(), images.dim(0), images.dim(1), images.dim(2),
                        images.dim(3), patch);
}

void image_to_patches_backward(Tensor& dimages, const Tensor& dpatches, int patch) {
  const char* op = "image_to_patches_backward";
  check_patches(op, "dimages", dimages, "dpatches", dpatches, patch, dimages.device());
  VLM_DISPATCH_CUDA(dimages.device(), op,
                    cuda::image_to_patches(dimages, dpatches, dimages.dim(1), dimages.dim(2), dimages.dim(3), patch,
                                           true));
  cpu::image_to_patches_backward(dimages.data<float>(), dpatches.data<float>(), dimages.dim(0), dimages.dim(1),
                                 dimages.dim(2), dimages.dim(3), patch);
}

namespace {
// x [B, S*S, C] and y [B, (S/r)^2, C*r*r] in the compute dtype of x; returns S.
int64_t check_pixel_shuffle(const char* op, const char* x_name, const Tensor& x, const char* y_name, const Tensor& y,
                            int factor, Device dev) {
  const DType dt = compute_dtype(op, x_name, x);
  check_tensor(op, x_name, x, dt, dev);
  check_ndim(op, x_name, x, 3);
  const int64_t n = x.dim(1);
  const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n))));
  VLM_CHECK(side * side == n, "ops::", op, ": ", x_name, " is ", x.describe(), ", whose ", n,
            " tokens are not a square grid");
  VLM_CHECK(factor > 0 && side % factor == 0, "ops::", op, ": ", x_name, " is ", x.describe(), ", a ", side, "x", side,
            " grid not divisible by factor ", factor);
  const int64_t out_side = side / factor;
  check_like(op, y_name, y, dt, dev, Shape{x.dim(0), out_side * out_side, x.dim(2) * factor * factor});
  return side;
}
}  // namespace

void pixel_shuffle_forward(Tensor& y, const Tensor& x, int factor) {
  const char* op = "pixel_shuffle_forward";
  const int64_t side = check_pixel_shuffle(op, "x", x, "y", y, factor, y.device());
  VLM_DISPATCH_CUDA(y.device(), op, cuda::pixel_shuffle(y, x, side, x.dim(2), factor, false));
  cpu::pixel_shuffle_forward(y.data<float>(), x.data<float>(), x.dim(0), side, x.dim(2), factor);
}

void pixel_shuffle_backward(Tensor& dx, const Tensor& dy, int factor) {
  const char* op = "pixel_shuffle_backward";
  const int64_t side = check_pixel_shuffle(op, "dx", dx, "dy", dy, factor, dx.device());
  VLM_DISPATCH_CUDA(dx.device(), op, cuda::pixel_shuffle(dx, dy, side, dx.dim(2), factor, true));
  cpu::pixel_shuffle_backward(dx.data<float>(), dy.data<float>(), dx.dim(0), side, dx.dim(2), factor);
}

// ---- optimizer ---------------------------------------------------------------------------------------------

namespace {
void check_adamw_params(const char* op, const AdamWParams& p) {
  VLM_CHECK(p.step >= 1, "ops::", op, ": step ", p.step, " must be >= 1 (1-based, for the bias correction)");
  VLM_CHECK(p.beta1 >= 0.f && p.beta1 < 1.f && p.beta2 >= 0.f && p.beta2 < 1.f, "ops::", op, ": betas (", p.beta1, ", ",
            p.beta2, ") must lie in [0, 1)");
}

// One tensor set: param, grad, m, v f32 of one shape on `dev`; param_bf16 (optional) bf16 of that shape.
void check_adamw_tensors(const char* op, const AdamWTensors& t, Device dev) {
  check_tensor(op, "param", t.param, DType::f32, dev);
  check_like(op, "grad", t.grad, DType::f32, dev, t.param.shape());
  check_like(op, "m", t.m, DType::f32, dev, t.param.shape());
  check_like(op, "v", t.v, DType::f32, dev, t.param.shape());
  check_optional(op, "param_bf16", t.param_bf16, DType::bf16, dev, t.param.shape());
}

// The step's scalars with the bias corrections computed in double.
cpu::AdamWScalars adamw_scalars(const AdamWParams& p) {
  const double step = static_cast<double>(p.step);
  return {p.lr,
          p.beta1,
          p.beta2,
          p.eps,
          p.weight_decay,
          p.grad_scale,
          static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta1), step)),
          static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta2), step))};
}

void adamw_cpu(const AdamWTensors& t, const cpu::AdamWScalars& s) {
  cpu::adamw_step(t.param.data<float>(), t.grad.data<float>(), t.m.data<float>(), t.v.data<float>(), t.param.numel(),
                  s);
  if (!t.param_bf16.defined()) return;
  const float* src = t.param.data<float>();
  auto* dst = static_cast<uint16_t*>(t.param_bf16.raw_data());
  for (int64_t i = 0; i < t.param.numel(); ++i) dst[i] = f32_to_bf16(src[i]);
}

// Every entry of a multi-tensor AdamW step: defined, and a valid tensor set on `dev`.
void check_adamw_list(const char* op, const std::vector<AdamWTensors>& tensors, Device dev) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = str("tensors[", i, "]");
    VLM_CHECK(tensors[i].param.defined(), "ops::", op, ": ", name, ".param is undefined");
    check_adamw_tensors(str(op, ": ", name).c_str(), tensors[i], dev);
  }
}

// The output of a reduction to one f64 (sum, sum_of_squares).
void check_f64_scalar(const char* op, const Tensor& out) {
  check_tensor(op, "out", out, DType::f64, out.device());
  VLM_CHECK(out.numel() == 1, "ops::", op, ": out must hold one f64, got ", out.describe());
}

#ifdef VLM_HAVE_CUDA
cuda::AdamWScalars to_cuda(const cpu::AdamWScalars& s) {
  return {s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.grad_scale, s.bias_correction1, s.bias_correction2};
}
#endif
}  // namespace

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p) {
  Tensor none;
  adamw_step(param, grad, m, v, p, none);
}

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p, Tensor& param_bf16) {
  const char* op = "adamw_step";
  const AdamWTensors t{param, grad, m, v, param_bf16};
  check_adamw_tensors(op, t, param.device());
  check_adamw_params(op, p);
  const cpu::AdamWScalars s = adamw_scalars(p);
  VLM_DISPATCH_CUDA(param.device(), op, cuda::adamw_step_multi({t}, to_cuda(s)));
  adamw_cpu(t, s);
}

void adamw_step_multi(const std::vector<AdamWTensors>& tensors, const AdamWParams& p) {
  const char* op = "adamw_step_multi";
  check_adamw_params(op, p);
  if (tensors.empty()) return;
  const Device dev = tensors.front().param.device();
  check_adamw_list(op, tensors, dev);
  const cpu::AdamWScalars s = adamw_scalars(p);
  VLM_DISPATCH_CUDA(dev, op, cuda::adamw_step_multi(tensors, to_cuda(s)));
  for (const AdamWTensors& t : tensors) adamw_cpu(t, s);
}

void adamw_step_multi(const std::vector<AdamWTensors>& tensors, const AdamWParams& p,
                      const Tensor& grad_sum_of_squares) {
  const char* op = "adamw_step_multi";
  check_adamw_params(op, p);
  if (tensors.empty()) return;
  const Device dev = tensors.front().param.device();
  check_like(op, "grad_sum_of_squares", grad_sum_of_squares, DType::f64, dev, Shape{1});
  check_adamw_list(op, tensors, dev);
  cpu::AdamWScalars s = adamw_scalars(p);
  const profile::OpRange range(op, dev);  // not through VLM_DISPATCH_CUDA: the CUDA call takes extra scalars
#ifdef VLM_HAVE_CUDA
  if (dev.is_cuda()) {
    cuda::AdamWScalars cs = to_cuda(s);
    cs.max_grad_norm = p.max_grad_norm;
    cs.grad_sum_of_squares = grad_sum_of_squares.data<double>();
    cuda::adamw_step_multi(tensors, cs);
    return;
  }
#endif
  s.grad_scale *= clip_factor(grad_sum_of_squares.data<double>()[0], p.max_grad_norm);
  for (const AdamWTensors& t : tensors) adamw_cpu(t, s);
}

double sum_of_squares(const std::vector<Tensor>& tensors) {
  // The device-side sum, read back at once: the one synchronization.
  const Device dev = tensors.empty() || !tensors.front().defined() ? Device::cpu() : tensors.front().device();
#ifndef VLM_HAVE_CUDA
  if (dev.is_cuda()) no_cuda("sum_of_squares");  // before allocating the result there
#endif
  Tensor out = Tensor::empty(Shape{1}, DType::f64, dev);
  sum_of_squares(out, tensors);
  return HostReadback(out).scalar_f64();
}

void zero_multi(const std::vector<Tensor>& tensors) {
  const char* op = "zero_multi";
  if (tensors.empty()) return;
  const Device dev = tensors.front().device();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    VLM_CHECK(t.defined(), "ops::", op, ": tensors[", i, "] is undefined");
    VLM_CHECK(t.device() == dev, "ops::", op, ": tensors[", i, "] is on ", t.device().to_string(), ", tensors[0] on ",
              dev.to_string());
    VLM_CHECK(t.is_contiguous(), "ops::", op, ": tensors[", i, "] ", t.describe(), " is not contiguous");
  }
  VLM_DISPATCH_CUDA(dev, op, cuda::zero_multi(tensors));
  for (const Tensor& t : tensors) std::memset(t.raw_data(), 0, t.nbytes());
}

void sum_of_squares(Tensor& out, const std::vector<Tensor>& tensors) {
  const char* op = "sum_of_squares";
  check_f64_scalar(op, out);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = str("tensors[", i, "]");
    check_tensor(op, name.c_str(), tensors[i], compute_dtype(op, name.c_str(), tensors[i]), out.device());
  }
  VLM_DISPATCH_CUDA(out.device(), op, cuda::sum_of_squares_into(out, tensors));
  double total = 0.0;
  for (const Tensor& t : tensors) total += cpu::sum_of_squares(t.data<float>(), t.numel());
  out.data<double>()[0] = total;
}

void sum(Tensor& out, const Tensor& x) {
  const char* op = "sum";
  check_f64_scalar(op, out);
  check_tensor(op, "x", x, DType::f32, out.device());
  VLM_DISPATCH_CUDA(out.device(), op, cuda::sum_into(out, x));
  double total = 0.0;
  const float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) total += p[i];
  out.data<double>()[0] = total;
}

// ---- errors ------------------------------------------------------------------------------------------------

Status check_index_errors(Device device) {
  if (device.is_cpu()) return Status();
#ifdef VLM_HAVE_CUDA
  return cuda::take_index_error(device);
#else
  return unsupported(str("ops::check_index_errors: ", device.to_string(), " in a build without CUDA"));
#endif
}

}  // namespace vlm::ops
