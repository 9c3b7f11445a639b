// The op boundary: each function validates shapes, dtypes, contiguity and devices (aborting with a message that
// names the op and the offending tensor), then dispatches on the device of its output. CPU runs the reference in
// cpu/; CUDA tensors abort until src/kernels/cuda/ provides the op: the `if (on_cuda(...))` line in each op is the
// one place its cuda:: call will go (and supports() learns its name).
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace vlm::ops {

namespace {

// Every op in ops.h, by name, for supports().
constexpr const char* kCpuOps[] = {"matmul",
                                   "matmul_batched",
                                   "linear_forward",
                                   "linear_backward",
                                   "fill",
                                   "scale",
                                   "add",
                                   "add_inplace",
                                   "add_rows_broadcast",
                                   "add_rows_broadcast_backward",
                                   "layernorm_forward",
                                   "layernorm_backward",
                                   "rmsnorm_forward",
                                   "rmsnorm_backward",
                                   "gelu_tanh_forward",
                                   "gelu_tanh_backward",
                                   "swiglu_forward",
                                   "swiglu_backward",
                                   "rope_forward",
                                   "rope_backward",
                                   "attention_forward",
                                   "attention_backward",
                                   "cross_entropy_forward",
                                   "cross_entropy_backward",
                                   "embedding_forward",
                                   "embedding_backward",
                                   "image_to_patches",
                                   "image_to_patches_backward",
                                   "pixel_shuffle_forward",
                                   "pixel_shuffle_backward",
                                   "scatter_rows",
                                   "gather_rows",
                                   "adamw_step",
                                   "sum_of_squares"};

[[noreturn]] void no_cuda(const char* op) { VLM_FAIL("ops::", op, ": no CUDA implementation in this build yet"); }

bool on_cuda(const Tensor& t) { return t.device().is_cuda(); }

// `t` must be defined, contiguous, of `dtype` and on `device`.
void check_tensor(const char* op, const char* name, const Tensor& t, DType dtype, Device device) {
  VLM_CHECK(t.defined(), "ops::", op, ": ", name, " is undefined");
  VLM_CHECK(t.dtype() == dtype, "ops::", op, ": ", name, " is ", t.describe(), ", expected dtype ", dtype_name(dtype));
  VLM_CHECK(t.device() == device, "ops::", op, ": ", name, " is ", t.describe(), ", expected device ",
            device.to_string());
  VLM_CHECK(t.is_contiguous(), "ops::", op, ": ", name, " is ", t.describe(), " and not contiguous");
}

void check_shape(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  VLM_CHECK(t.shape() == shape, "ops::", op, ": ", name, " is ", t.describe(), ", expected shape ", shape.to_string());
}

// A defined f32 tensor of exactly `shape` on `device`.
void check_f32(const char* op, const char* name, const Tensor& t, Device device, const Shape& shape) {
  check_tensor(op, name, t, DType::f32, device);
  check_shape(op, name, t, shape);
}

// Same for an optional tensor (an undefined one passes).
void check_optional_f32(const char* op, const char* name, const Tensor& t, Device device, const Shape& shape) {
  if (t.defined()) check_f32(op, name, t, device, shape);
}

void check_ndim(const char* op, const char* name, const Tensor& t, int ndim) {
  VLM_CHECK(t.ndim() == ndim, "ops::", op, ": ", name, " is ", t.describe(), ", expected ", ndim, "-D");
}

// Checks an i32 index vector of `n` entries (ids, targets, positions, index).
void check_i32_vector(const char* op, const char* name, const Tensor& t, Device device, int64_t n) {
  check_tensor(op, name, t, DType::i32, device);
  check_shape(op, name, t, Shape{n});
}

float* f32_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// Rows of a [..., C] activation: the product of all but the last dim.
int64_t leading_rows(const Tensor& t) {
  int64_t rows = 1;
  for (int i = 0; i + 1 < t.ndim(); ++i) rows *= t.dim(i);
  return rows;
}

// `like` with its last dim replaced by `last`.
Shape with_last_dim(const Tensor& like, int64_t last) {
  Shape s = like.shape();
  s[s.ndim() - 1] = last;
  return s;
}

// Shared validation of matmul / matmul_batched: returns {m, n, k} of the (per-batch) product, whose operands are
// dims [first, first + 2) of out, a and b.
struct GemmDims {
  int64_t m, n, k;
};
GemmDims check_gemm(const char* op, const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                    int first) {
  const Device dev = out.device();
  check_tensor(op, "out", out, DType::f32, dev);
  check_tensor(op, "a", a, DType::f32, dev);
  check_tensor(op, "b", b, DType::f32, dev);
  check_ndim(op, "out", out, first + 2);
  check_ndim(op, "a", a, first + 2);
  check_ndim(op, "b", b, first + 2);
  const int64_t m = out.dim(first), n = out.dim(first + 1);
  const int64_t k = a.dim(trans_a ? first : first + 1);
  VLM_CHECK(a.dim(trans_a ? first + 1 : first) == m, "ops::", op, ": a is ", a.describe(),
            (trans_a ? " (transposed)" : ""), " but out is ", out.describe());
  const int64_t b_k = b.dim(trans_b ? first + 1 : first), b_n = b.dim(trans_b ? first : first + 1);
  VLM_CHECK(b_k == k && b_n == n, "ops::", op, ": b is ", b.describe(), (trans_b ? " (transposed)" : ""), ", a is ",
            a.describe(), (trans_a ? " (transposed)" : ""), ", out is ", out.describe());
  VLM_CHECK(out.numel() == 0 || (out.raw_data() != a.raw_data() && out.raw_data() != b.raw_data()), "ops::", op,
            ": out must not alias a or b");
  return {m, n, k};
}

}  // namespace

bool supports(const std::string& op, Device device) {
  if (device.is_cuda()) return false;  // no CUDA op in this build yet; src/kernels/cuda/ will list its own
  return std::any_of(std::begin(kCpuOps), std::end(kCpuOps), [&](const char* name) { return op == name; });
}

// ---- GEMM --------------------------------------------------------------------------------------------------

void matmul(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha, float beta) {
  const GemmDims d = check_gemm("matmul", out, a, b, trans_a, trans_b, 0);
  if (on_cuda(out)) no_cuda("matmul");
  cpu::gemm(out.data<float>(), a.data<float>(), b.data<float>(), d.m, d.n, d.k, trans_a, trans_b, alpha, beta);
}

void matmul_batched(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
                    float beta) {
  const char* op = "matmul_batched";
  const GemmDims d = check_gemm(op, out, a, b, trans_a, trans_b, 1);
  VLM_CHECK(a.dim(0) == out.dim(0) && b.dim(0) == out.dim(0), "ops::", op, ": batch sizes differ: out ", out.describe(),
            ", a ", a.describe(), ", b ", b.describe());
  if (on_cuda(out)) no_cuda(op);
  cpu::gemm_batched(out.data<float>(), a.data<float>(), b.data<float>(), out.dim(0), d.m, d.n, d.k, trans_a, trans_b,
                    alpha, beta);
}

void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b) {
  const char* op = "linear_forward";
  const Device dev = y.device();
  check_tensor(op, "x", x, DType::f32, dev);
  check_tensor(op, "w", w, DType::f32, dev);
  check_ndim(op, "w", w, 2);
  VLM_CHECK(x.ndim() >= 2, "ops::", op, ": x is ", x.describe(), ", expected [T, in] (leading dims flatten into T)");
  const int64_t out = w.dim(0), in = w.dim(1);
  check_shape(op, "x", x, with_last_dim(x, in));
  check_f32(op, "y", y, dev, with_last_dim(x, out));
  check_optional_f32(op, "b", b, dev, Shape{out});
  if (on_cuda(y)) no_cuda(op);
  cpu::linear_forward(y.data<float>(), x.data<float>(), w.data<float>(), f32_or_null(b), leading_rows(x), in, out);
}

void linear_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w) {
  const char* op = "linear_backward";
  const Device dev = dy.device();
  check_tensor(op, "dy", dy, DType::f32, dev);
  check_tensor(op, "x", x, DType::f32, dev);
  check_tensor(op, "w", w, DType::f32, dev);
  check_ndim(op, "w", w, 2);
  VLM_CHECK(x.ndim() >= 2, "ops::", op, ": x is ", x.describe(), ", expected [T, in] (leading dims flatten into T)");
  const int64_t out = w.dim(0), in = w.dim(1);
  check_shape(op, "x", x, with_last_dim(x, in));
  check_shape(op, "dy", dy, with_last_dim(x, out));
  check_optional_f32(op, "dx", dx, dev, x.shape());
  check_optional_f32(op, "dw", dw, dev, w.shape());
  check_optional_f32(op, "db", db, dev, Shape{out});
  if (on_cuda(dy)) no_cuda(op);
  cpu::linear_backward(f32_or_null(dx), f32_or_null(dw), f32_or_null(db), dy.data<float>(), x.data<float>(),
                       w.data<float>(), leading_rows(x), in, out);
}

// ---- elementwise -------------------------------------------------------------------------------------------

void fill(Tensor& x, float value) {
  check_tensor("fill", "x", x, DType::f32, x.device());
  if (on_cuda(x)) no_cuda("fill");
  cpu::fill(x.data<float>(), x.numel(), value);
}

void scale(Tensor& x, float s) {
  check_tensor("scale", "x", x, DType::f32, x.device());
  if (on_cuda(x)) no_cuda("scale");
  cpu::scale(x.data<float>(), x.numel(), s);
}

void add(Tensor& out, const Tensor& a, const Tensor& b) {
  check_tensor("add", "out", out, DType::f32, out.device());
  check_f32("add", "a", a, out.device(), out.shape());
  check_f32("add", "b", b, out.device(), out.shape());
  if (on_cuda(out)) no_cuda("add");
  cpu::add(out.data<float>(), a.data<float>(), b.data<float>(), out.numel());
}

void add_inplace(Tensor& a, const Tensor& b) {
  check_tensor("add_inplace", "a", a, DType::f32, a.device());
  check_f32("add_inplace", "b", b, a.device(), a.shape());
  if (on_cuda(a)) no_cuda("add_inplace");
  cpu::add_inplace(a.data<float>(), b.data<float>(), a.numel());
}

namespace {
// x [B * P, C] against pos [P, C]: returns B.
int64_t check_row_broadcast(const char* op, const char* x_name, const Tensor& x, const char* pos_name,
                            const Tensor& pos) {
  check_tensor(op, pos_name, pos, DType::f32, x.device());
  check_ndim(op, x_name, x, 2);
  check_ndim(op, pos_name, pos, 2);
  const int64_t rows = pos.dim(0);
  VLM_CHECK(x.dim(1) == pos.dim(1) && (rows > 0 ? x.dim(0) % rows == 0 : x.dim(0) == 0), "ops::", op, ": ", x_name,
            " is ", x.describe(), ", which is not a whole number of blocks of ", pos_name, " ", pos.describe());
  return rows > 0 ? x.dim(0) / rows : 0;
}
}  // namespace

void add_rows_broadcast(Tensor& x, const Tensor& pos) {
  const char* op = "add_rows_broadcast";
  check_tensor(op, "x", x, DType::f32, x.device());
  const int64_t blocks = check_row_broadcast(op, "x", x, "pos", pos);
  if (on_cuda(x)) no_cuda(op);
  cpu::add_rows_broadcast(x.data<float>(), pos.data<float>(), blocks, pos.dim(0), pos.dim(1));
}

void add_rows_broadcast_backward(Tensor& dpos, const Tensor& dx) {
  const char* op = "add_rows_broadcast_backward";
  check_tensor(op, "dpos", dpos, DType::f32, dpos.device());
  check_tensor(op, "dx", dx, DType::f32, dpos.device());
  const int64_t blocks = check_row_broadcast(op, "dx", dx, "dpos", dpos);
  if (on_cuda(dpos)) no_cuda(op);
  cpu::add_rows_broadcast_backward(dpos.data<float>(), dx.data<float>(), blocks, dpos.dim(0), dpos.dim(1));
}

// ---- normalization -----------------------------------------------------------------------------------------

namespace {
// x [..., C] with w [C]: returns C. Checks x, w and (optional) per-row stats of numel rows.
int64_t check_norm_input(const char* op, const Tensor& x, const Tensor& w, Device dev) {
  check_tensor(op, "x", x, DType::f32, dev);
  VLM_CHECK(x.ndim() >= 1, "ops::", op, ": x is ", x.describe(), ", expected [T, C]");
  const int64_t cols = x.dim(-1);
  check_f32(op, "w", w, dev, Shape{cols});
  return cols;
}
void check_row_stat(const char* op, const char* name, const Tensor& t, Device dev, int64_t rows, bool required) {
  if (!required && !t.defined()) return;
  check_tensor(op, name, t, DType::f32, dev);
  VLM_CHECK(t.numel() == rows, "ops::", op, ": ", name, " is ", t.describe(), ", expected ", rows,
            " values (one per row)");
}
}  // namespace

void layernorm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w, const Tensor& b,
                       float eps) {
  const char* op = "layernorm_forward";
  const Device dev = y.device();
  const int64_t cols = check_norm_input(op, x, w, dev);
  check_f32(op, "y", y, dev, x.shape());
  check_optional_f32(op, "b", b, dev, Shape{cols});
  const int64_t rows = leading_rows(x);
  check_row_stat(op, "mean", mean, dev, rows, false);
  check_row_stat(op, "rstd", rstd, dev, rows, false);
  if (on_cuda(y)) no_cuda(op);
  cpu::layernorm_forward(y.data<float>(), f32_or_null(mean), f32_or_null(rstd), x.data<float>(), w.data<float>(),
                         f32_or_null(b), rows, cols, eps);
}

void layernorm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& mean, const Tensor& rstd) {
  const char* op = "layernorm_backward";
  const Device dev = dy.device();
  const int64_t cols = check_norm_input(op, x, w, dev);
  check_f32(op, "dy", dy, dev, x.shape());
  const int64_t rows = leading_rows(x);
  check_row_stat(op, "mean", mean, dev, rows, true);
  check_row_stat(op, "rstd", rstd, dev, rows, true);
  check_optional_f32(op, "dx", dx, dev, x.shape());
  check_optional_f32(op, "dw", dw, dev, Shape{cols});
  check_optional_f32(op, "db", db, dev, Shape{cols});
  if (on_cuda(dy)) no_cuda(op);
  cpu::layernorm_backward(f32_or_null(dx), f32_or_null(dw), f32_or_null(db), dy.data<float>(), x.data<float>(),
                          w.data<float>(), mean.data<float>(), rstd.data<float>(), rows, cols);
}

void rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, float eps) {
  const char* op = "rmsnorm_forward";
  const Device dev = y.device();
  const int64_t cols = check_norm_input(op, x, w, dev);
  check_f32(op, "y", y, dev, x.shape());
  const int64_t rows = leading_rows(x);
  check_row_stat(op, "rstd", rstd, dev, rows, false);
  if (on_cuda(y)) no_cuda(op);
  cpu::rmsnorm_forward(y.data<float>(), f32_or_null(rstd), x.data<float>(), w.data<float>(), rows, cols, eps);
}

void rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd) {
  const char* op = "rmsnorm_backward";
  const Device dev = dy.device();
  const int64_t cols = check_norm_input(op, x, w, dev);
  check_f32(op, "dy", dy, dev, x.shape());
  const int64_t rows = leading_rows(x);
  check_row_stat(op, "rstd", rstd, dev, rows, true);
  check_optional_f32(op, "dx", dx, dev, x.shape());
  check_optional_f32(op, "dw", dw, dev, Shape{cols});
  if (on_cuda(dy)) no_cuda(op);
  cpu::rmsnorm_backward(f32_or_null(dx), f32_or_null(dw), dy.data<float>(), x.data<float>(), w.data<float>(),
                        rstd.data<float>(), rows, cols);
}

// ---- activations -------------------------------------------------------------------------------------------

void gelu_tanh_forward(Tensor& y, const Tensor& x) {
  const char* op = "gelu_tanh_forward";
  check_tensor(op, "y", y, DType::f32, y.device());
  check_f32(op, "x", x, y.device(), y.shape());
  if (on_cuda(y)) no_cuda(op);
  cpu::gelu_tanh_forward(y.data<float>(), x.data<float>(), y.numel());
}

void gelu_tanh_backward(Tensor& dx, const Tensor& dy, const Tensor& x) {
  const char* op = "gelu_tanh_backward";
  check_tensor(op, "dx", dx, DType::f32, dx.device());
  check_f32(op, "dy", dy, dx.device(), dx.shape());
  check_f32(op, "x", x, dx.device(), dx.shape());
  if (on_cuda(dx)) no_cuda(op);
  cpu::gelu_tanh_backward(dx.data<float>(), dy.data<float>(), x.data<float>(), dx.numel());
}

void swiglu_forward(Tensor& y, const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_forward";
  check_tensor(op, "y", y, DType::f32, y.device());
  check_f32(op, "gate", gate, y.device(), y.shape());
  check_f32(op, "up", up, y.device(), y.shape());
  if (on_cuda(y)) no_cuda(op);
  cpu::swiglu_forward(y.data<float>(), gate.data<float>(), up.data<float>(), y.numel());
}

void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dy, const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_backward";
  const Device dev = dy.device();
  check_tensor(op, "dy", dy, DType::f32, dev);
  check_f32(op, "gate", gate, dev, dy.shape());
  check_f32(op, "up", up, dev, dy.shape());
  check_optional_f32(op, "dgate", dgate, dev, dy.shape());
  check_optional_f32(op, "dup", dup, dev, dy.shape());
  if (on_cuda(dy)) no_cuda(op);
  cpu::swiglu_backward(f32_or_null(dgate), f32_or_null(dup), dy.data<float>(), gate.data<float>(), up.data<float>(),
                       dy.numel());
}

// ---- rotary position embedding -----------------------------------------------------------------------------

namespace {
void check_rope(const char* op, const Tensor& x, const Tensor& positions) {
  check_tensor(op, "x", x, DType::f32, x.device());
  check_ndim(op, "x", x, 3);
  VLM_CHECK(x.dim(2) % 2 == 0, "ops::", op, ": x is ", x.describe(), ", head dim must be even");
  check_i32_vector(op, "positions", positions, x.device(), x.dim(0));
}
}  // namespace

void rope_forward(Tensor& x, const Tensor& positions, float theta) {
  check_rope("rope_forward", x, positions);
  if (on_cuda(x)) no_cuda("rope_forward");
  cpu::rope_forward(x.data<float>(), positions.data<int32_t>(), x.dim(0), x.dim(1), x.dim(2), theta);
}

void rope_backward(Tensor& dx, const Tensor& positions, float theta) {
  check_rope("rope_backward", dx, positions);
  if (on_cuda(dx)) no_cuda("rope_backward");
  cpu::rope_backward(dx.data<float>(), positions.data<int32_t>(), dx.dim(0), dx.dim(1), dx.dim(2), theta);
}

// ---- attention ---------------------------------------------------------------------------------------------

namespace {
// Validates the inputs shared by forward and backward and fills the raw-pointer params.
cpu::AttentionParams check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& cu_q, const Tensor& cu_k, int max_seqlen_q, int max_seqlen_k,
                                     float scale, bool causal, Device dev) {
  check_tensor(op, "q", q, DType::f32, dev);
  check_tensor(op, "k", k, DType::f32, dev);
  check_ndim(op, "q", q, 3);
  check_ndim(op, "k", k, 3);
  check_f32(op, "v", v, dev, k.shape());
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
  if (!on_cuda(q)) {  // host pointers only; the cu_seqlens values are checked by the CPU op
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
                       float scale, bool causal) {
  const char* op = "attention_forward";
  const Device dev = out.device();
  const cpu::AttentionParams p =
      check_attention(op, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, dev);
  check_f32(op, "out", out, dev, q.shape());
  check_f32(op, "lse", lse, dev, Shape{p.heads_q, p.tokens_q});
  if (on_cuda(out)) no_cuda(op);
  cpu::attention_forward(out.data<float>(), lse.data<float>(), p);
}

void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& cu_seqlens_q,
                        const Tensor& cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, float scale, bool causal) {
  const char* op = "attention_backward";
  const Device dev = dout.device();
  const cpu::AttentionParams p =
      check_attention(op, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal, dev);
  check_f32(op, "dout", dout, dev, q.shape());
  check_f32(op, "out", out, dev, q.shape());
  check_f32(op, "lse", lse, dev, Shape{p.heads_q, p.tokens_q});
  check_optional_f32(op, "dq", dq, dev, q.shape());
  check_optional_f32(op, "dk", dk, dev, k.shape());
  check_optional_f32(op, "dv", dv, dev, k.shape());
  if (on_cuda(dout)) no_cuda(op);
  cpu::attention_backward(f32_or_null(dq), f32_or_null(dk), f32_or_null(dv), dout.data<float>(), out.data<float>(),
                          lse.data<float>(), p);
}

// ---- loss --------------------------------------------------------------------------------------------------

namespace {
void check_logits(const char* op, const char* name, const Tensor& logits, const Tensor& targets, Device dev) {
  check_tensor(op, name, logits, DType::f32, dev);
  check_ndim(op, name, logits, 2);
  VLM_CHECK(logits.dim(1) > 0, "ops::", op, ": ", name, " is ", logits.describe(), ", expected a vocabulary > 0");
  check_i32_vector(op, "targets", targets, dev, logits.dim(0));
}
}  // namespace

void cross_entropy_forward(Tensor& losses, const Tensor& logits, const Tensor& targets, int ignore_index) {
  const char* op = "cross_entropy_forward";
  const Device dev = losses.device();
  check_logits(op, "logits", logits, targets, dev);
  check_f32(op, "losses", losses, dev, Shape{logits.dim(0)});
  if (on_cuda(losses)) no_cuda(op);
  cpu::cross_entropy_forward(losses.data<float>(), logits.data<float>(), targets.data<int32_t>(), logits.dim(0),
                             logits.dim(1), ignore_index);
}

void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& targets, float dloss,
                            int ignore_index) {
  const char* op = "cross_entropy_backward";
  const Device dev = dlogits.device();
  check_logits(op, "logits", logits, targets, dev);
  check_f32(op, "dlogits", dlogits, dev, logits.shape());
  if (on_cuda(dlogits)) no_cuda(op);
  cpu::cross_entropy_backward(dlogits.data<float>(), logits.data<float>(), targets.data<int32_t>(), dloss,
                              logits.dim(0), logits.dim(1), ignore_index);
}

// ---- embeddings and data movement --------------------------------------------------------------------------

namespace {
// table-like [R, C] and rows-like [N, C] with an i32 index [N].
void check_rows_pair(const char* op, const char* table_name, const Tensor& table, const char* rows_name,
                     const Tensor& rows, const char* index_name, const Tensor& index, Device dev) {
  check_tensor(op, table_name, table, DType::f32, dev);
  check_tensor(op, rows_name, rows, DType::f32, dev);
  check_ndim(op, table_name, table, 2);
  check_ndim(op, rows_name, rows, 2);
  VLM_CHECK(table.dim(1) == rows.dim(1), "ops::", op, ": ", table_name, " is ", table.describe(), " but ", rows_name,
            " is ", rows.describe(), " (row widths differ)");
  check_i32_vector(op, index_name, index, dev, rows.dim(0));
}
}  // namespace

void embedding_forward(Tensor& out, const Tensor& table, const Tensor& ids) {
  const char* op = "embedding_forward";
  check_rows_pair(op, "table", table, "out", out, "ids", ids, out.device());
  if (on_cuda(out)) no_cuda(op);
  cpu::embedding_forward(out.data<float>(), table.data<float>(), ids.data<int32_t>(), out.dim(0), table.dim(0),
                         table.dim(1));
}

void embedding_backward(Tensor& dtable, const Tensor& dout, const Tensor& ids) {
  const char* op = "embedding_backward";
  check_rows_pair(op, "dtable", dtable, "dout", dout, "ids", ids, dtable.device());
  if (on_cuda(dtable)) no_cuda(op);
  cpu::embedding_backward(dtable.data<float>(), dout.data<float>(), ids.data<int32_t>(), dout.dim(0), dtable.dim(0),
                          dtable.dim(1));
}

void scatter_rows(Tensor& out, const Tensor& src, const Tensor& index) {
  const char* op = "scatter_rows";
  check_rows_pair(op, "out", out, "src", src, "index", index, out.device());
  if (on_cuda(out)) no_cuda(op);
  cpu::scatter_rows(out.data<float>(), src.data<float>(), index.data<int32_t>(), src.dim(0), out.dim(0), out.dim(1));
}

void gather_rows(Tensor& out, const Tensor& src, const Tensor& index) {
  const char* op = "gather_rows";
  check_rows_pair(op, "src", src, "out", out, "index", index, out.device());
  if (on_cuda(out)) no_cuda(op);
  cpu::gather_rows(out.data<float>(), src.data<float>(), index.data<int32_t>(), out.dim(0), src.dim(0), src.dim(1));
}

namespace {
// images [B, C, H, W] and patches; returns nothing, aborts on mismatch.
void check_patches(const char* op, const char* images_name, const Tensor& images, const char* patches_name,
                   const Tensor& patches, int patch, Device dev) {
  check_tensor(op, images_name, images, DType::f32, dev);
  check_ndim(op, images_name, images, 4);
  VLM_CHECK(patch > 0 && images.dim(2) % patch == 0 && images.dim(3) % patch == 0, "ops::", op, ": ", images_name,
            " is ", images.describe(), ", not divisible into ", patch, "x", patch, " patches");
  const int64_t b = images.dim(0), c = images.dim(1), gh = images.dim(2) / patch, gw = images.dim(3) / patch;
  check_f32(op, patches_name, patches, dev, Shape{b * gh * gw, c * patch * patch});
}
}  // namespace

void image_to_patches(Tensor& patches, const Tensor& images, int patch) {
  const char* op = "image_to_patches";
  check_patches(op, "images", images, "patches", patches, patch, patches.device());
  if (on_cuda(patches)) no_cuda(op);
  cpu::image_to_patches(patches.data<float>(), images.data<float>(), images.dim(0), images.dim(1), images.dim(2),
                        images.dim(3), patch);
}

void image_to_patches_backward(Tensor& dimages, const Tensor& dpatches, int patch) {
  const char* op = "image_to_patches_backward";
  check_patches(op, "dimages", dimages, "dpatches", dpatches, patch, dimages.device());
  if (on_cuda(dimages)) no_cuda(op);
  cpu::image_to_patches_backward(dimages.data<float>(), dpatches.data<float>(), dimages.dim(0), dimages.dim(1),
                                 dimages.dim(2), dimages.dim(3), patch);
}

namespace {
// x [B, S*S, C] and y [B, (S/r)^2, C*r*r]; returns S.
int64_t check_pixel_shuffle(const char* op, const char* x_name, const Tensor& x, const char* y_name, const Tensor& y,
                            int factor, Device dev) {
  check_tensor(op, x_name, x, DType::f32, dev);
  check_ndim(op, x_name, x, 3);
  const int64_t n = x.dim(1);
  const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n))));
  VLM_CHECK(side * side == n, "ops::", op, ": ", x_name, " is ", x.describe(), ", whose ", n,
            " tokens are not a square grid");
  VLM_CHECK(factor > 0 && side % factor == 0, "ops::", op, ": ", x_name, " is ", x.describe(), ", a ", side, "x", side,
            " grid not divisible by factor ", factor);
  const int64_t out_side = side / factor;
  check_f32(op, y_name, y, dev, Shape{x.dim(0), out_side * out_side, x.dim(2) * factor * factor});
  return side;
}
}  // namespace

void pixel_shuffle_forward(Tensor& y, const Tensor& x, int factor) {
  const char* op = "pixel_shuffle_forward";
  const int64_t side = check_pixel_shuffle(op, "x", x, "y", y, factor, y.device());
  if (on_cuda(y)) no_cuda(op);
  cpu::pixel_shuffle_forward(y.data<float>(), x.data<float>(), x.dim(0), side, x.dim(2), factor);
}

void pixel_shuffle_backward(Tensor& dx, const Tensor& dy, int factor) {
  const char* op = "pixel_shuffle_backward";
  const int64_t side = check_pixel_shuffle(op, "dx", dx, "dy", dy, factor, dx.device());
  if (on_cuda(dx)) no_cuda(op);
  cpu::pixel_shuffle_backward(dx.data<float>(), dy.data<float>(), dx.dim(0), side, dx.dim(2), factor);
}

// ---- optimizer ---------------------------------------------------------------------------------------------

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p) {
  const char* op = "adamw_step";
  const Device dev = param.device();
  check_tensor(op, "param", param, DType::f32, dev);
  check_f32(op, "grad", grad, dev, param.shape());
  check_f32(op, "m", m, dev, param.shape());
  check_f32(op, "v", v, dev, param.shape());
  VLM_CHECK(p.step >= 1, "ops::", op, ": step ", p.step, " must be >= 1 (1-based, for the bias correction)");
  VLM_CHECK(p.beta1 >= 0.f && p.beta1 < 1.f && p.beta2 >= 0.f && p.beta2 < 1.f, "ops::", op, ": betas (", p.beta1, ", ",
            p.beta2, ") must lie in [0, 1)");
  if (on_cuda(param)) no_cuda(op);
  const double step = static_cast<double>(p.step);
  const cpu::AdamWScalars s{p.lr,
                            p.beta1,
                            p.beta2,
                            p.eps,
                            p.weight_decay,
                            p.grad_scale,
                            static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta1), step)),
                            static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta2), step))};
  cpu::adamw_step(param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(), param.numel(), s);
}

double sum_of_squares(const std::vector<Tensor>& tensors) {
  double total = 0.0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const std::string name = str("tensors[", i, "]");
    check_tensor("sum_of_squares", name.c_str(), t, DType::f32, t.device());
    if (on_cuda(t)) no_cuda("sum_of_squares");
    total += cpu::sum_of_squares(t.data<float>(), t.numel());
  }
  return total;
}

}  // namespace vlm::ops
