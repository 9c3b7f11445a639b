// The ops on packed projections on CUDA against the CPU reference, f32 and bf16, into NaN-filled guarded outputs (every
// element must be written, nothing outside): the QKV split (+ RoPE) and its backward on both CUDA paths (vectors:
// D = 16, 64, 128 with aligned tensors; scalar: D = 6 and 12, or a qkv / dq starting 3 elements into its buffer) and
// T = 1, 17, 1000; the split against CUDA rope_forward / rope_backward on the split tensors (bit for bit: same angle
// recipe and rotation); packed SwiGLU and its backward (also in place) on vector and scalar shapes.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

struct QkvCase {
  int64_t tokens, heads_q, heads_kv, dim;
  float theta;
};
// The text shape (9/3 heads, D 64, theta 1e5), the vision shape (12/12, theta 0), D = 128, D = 16 (one bf16 vector
// per half), D = 6 and 12 (scalar for bf16; 12 is scalar for f32 too), T = 1, 17, 1000.
const QkvCase kCases[] = {{1, 9, 3, 64, 100000.f},  {17, 9, 3, 64, 100000.f}, {1000, 9, 3, 64, 100000.f},
                          {17, 12, 12, 64, 0.f},    {1000, 12, 12, 64, 0.f},  {1, 4, 1, 128, 10000.f},
                          {17, 4, 1, 128, 10000.f}, {1000, 8, 2, 128, 10000.f}, {17, 5, 1, 16, 500.f},
                          {1, 2, 2, 6, 10000.f},    {17, 3, 1, 6, 10000.f},   {1000, 6, 2, 6, 0.f},
                          {17, 2, 1, 12, 10000.f}};

std::string describe(const QkvCase& c, DType dt, int64_t offset) {
  return (::testing::Message() << dtype_label(dt) << " T=" << c.tokens << " Hq=" << c.heads_q << " Hkv=" << c.heads_kv
                               << " D=" << c.dim << " theta=" << c.theta << " offset=" << offset)
      .GetString();
}

std::vector<int32_t> positions_of(int64_t tokens) {
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>((t * 53 + 7) % 12000);
  return pos;
}

// The rotations on both sides use the same f32 angles; CUDA's cosf/sinf (<= 2 ulp) and FMA contraction differ from
// the CPU's by a few ulp of |x| (x ~ N(0, 1), |x| < ~5 here).
constexpr Tolerance kRotation{1e-5, 4e-6};

TEST(CudaQkvSplit, ForwardAndBackwardMatchCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 1000;
  for (DType dt : compute_dtypes())
    for (const QkvCase& c : kCases)
      for (int64_t offset : {0, 3}) {
        SCOPED_TRACE(describe(c, dt, offset));
        const Shape q_shape{c.tokens, c.heads_q, c.dim}, kv_shape{c.tokens, c.heads_kv, c.dim};
        const Shape packed_shape{c.tokens, (c.heads_q + 2 * c.heads_kv) * c.dim};
        const std::vector<int32_t> pos = positions_of(c.tokens);
        const Tensor positions = c.theta > 0.f ? i32_tensor(pos) : Tensor();
        const Tensor positions_gpu = c.theta > 0.f ? gpu_i32(pos) : Tensor();
        const Tolerance tol = output_tolerance(dt, kRotation);

        const Tensor qkv = random_normal(packed_shape, seed++);
        Tensor q_ref = Tensor::empty(q_shape, DType::f32), k_ref = Tensor::empty(kv_shape, DType::f32);
        Tensor v_ref = Tensor::empty(kv_shape, DType::f32);
        ops::qkv_split_forward(q_ref, k_ref, v_ref, rounded(qkv, dt), positions, c.theta);
        Guarded q(q_shape, dt), k(kv_shape, dt), v(kv_shape, dt);
        ops::qkv_split_forward(q.view(), k.view(), v.view(), to_gpu_at_offset(qkv, dt, offset), positions_gpu,
                               c.theta);
        EXPECT_TRUE(matches(q, q_ref, tol)) << "q";
        EXPECT_TRUE(matches(k, k_ref, tol)) << "k";
        // v is moved, never converted: exact.
        EXPECT_TRUE(bitwise_equal(to_cpu_f32(v.view()), v_ref)) << "v";
        EXPECT_TRUE(v.guards_intact());

        const Tensor dq = random_normal(q_shape, seed++), dk = random_normal(kv_shape, seed++);
        const Tensor dv = random_normal(kv_shape, seed++);
        Tensor dqkv_ref = Tensor::empty(packed_shape, DType::f32);
        ops::qkv_split_backward(dqkv_ref, rounded(dq, dt), rounded(dk, dt), rounded(dv, dt), positions, c.theta);
        Guarded dqkv(packed_shape, dt);
        ops::qkv_split_backward(dqkv.view(), to_gpu_at_offset(dq, dt, offset), to_gpu(dk, dt), to_gpu(dv, dt),
                                positions_gpu, c.theta);
        EXPECT_TRUE(matches(dqkv, dqkv_ref, tol)) << "dqkv";
      }
}

// Columns [c0, c1) of a CPU f32 matrix, contiguous, shaped `shape`.
Tensor columns(const Tensor& m, int64_t c0, int64_t c1, const Shape& shape) {
  const int64_t rows = m.dim(0), cols = m.dim(1), w = c1 - c0;
  Tensor out = Tensor::empty({rows, w}, DType::f32);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < w; ++c) out.data<float>()[r * w + c] = m.data<float>()[r * cols + c0 + c];
  return out.view(shape);
}

// The split and its backward equal CUDA's rope_forward / rope_backward on the split tensors bit for bit, whichever
// path each takes (the split's qkv / dq at offset 3 takes the scalar path; rope's fresh tensors the vector one).
TEST(CudaQkvSplit, EqualsCudaRopeBitForBit) {
  VLM_SKIP_WITHOUT_CUDA();
  const QkvCase cases[] = {{37, 9, 3, 64, 100000.f}, {37, 4, 2, 128, 10000.f}, {37, 3, 1, 6, 10000.f}};
  uint64_t seed = 2000;
  for (DType dt : compute_dtypes())
    for (const QkvCase& c : cases)
      for (int64_t offset : {0, 3}) {
        SCOPED_TRACE(describe(c, dt, offset));
        const Shape q_shape{c.tokens, c.heads_q, c.dim}, kv_shape{c.tokens, c.heads_kv, c.dim};
        const int64_t qc = c.heads_q * c.dim, kc = c.heads_kv * c.dim;
        const Tensor positions = gpu_i32(positions_of(c.tokens));
        // Inputs rounded to dt first, so uploading any part of them gives the same bits as the packed upload.
        const Tensor qkv = rounded(random_normal({c.tokens, qc + 2 * kc}, seed++), dt);
        Tensor q = Tensor::empty(q_shape, dt, gpu()), k = Tensor::empty(kv_shape, dt, gpu());
        Tensor v = Tensor::empty(kv_shape, dt, gpu());
        ops::qkv_split_forward(q, k, v, to_gpu_at_offset(qkv, dt, offset), positions, c.theta);
        Tensor q_rope = to_gpu(columns(qkv, 0, qc, q_shape), dt);
        Tensor k_rope = to_gpu(columns(qkv, qc, qc + kc, kv_shape), dt);
        ops::rope_forward(q_rope, positions, c.theta);
        ops::rope_forward(k_rope, positions, c.theta);
        EXPECT_TRUE(bitwise_equal(q.to(Device::cpu()), q_rope.to(Device::cpu()))) << "q";
        EXPECT_TRUE(bitwise_equal(k.to(Device::cpu()), k_rope.to(Device::cpu()))) << "k";

        const Tensor dq = rounded(random_normal(q_shape, seed++), dt);
        const Tensor dk = rounded(random_normal(kv_shape, seed++), dt);
        const Tensor dv = rounded(random_normal(kv_shape, seed++), dt);
        Tensor dqkv = Tensor::empty(qkv.shape(), dt, gpu());
        ops::qkv_split_backward(dqkv, to_gpu_at_offset(dq, dt, offset), to_gpu(dk, dt), to_gpu(dv, dt), positions,
                                c.theta);
        Tensor dq_rope = to_gpu(dq, dt), dk_rope = to_gpu(dk, dt);
        ops::rope_backward(dq_rope, positions, c.theta);
        ops::rope_backward(dk_rope, positions, c.theta);
        const Tensor dqkv_host = to_cpu_f32(dqkv);
        EXPECT_TRUE(bitwise_equal(columns(dqkv_host, 0, qc, q_shape), to_cpu_f32(dq_rope))) << "dq";
        EXPECT_TRUE(bitwise_equal(columns(dqkv_host, qc, qc + kc, kv_shape), to_cpu_f32(dk_rope))) << "dk";
        EXPECT_TRUE(bitwise_equal(columns(dqkv_host, qc + kc, qc + 2 * kc, kv_shape), dv)) << "dv";
      }
}

// f32 elementwise math on identical inputs: CUDA's expf and the CPU's differ by a few ulp (as the swiglu tests of
// test_cuda_elementwise.cpp).
constexpr Tolerance kElementwise{2e-6, 1e-7};

TEST(CudaSwigluPacked, ForwardAndBackwardMatchCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  // I = 1536 (the model), 8 (one bf16 vector), 12 (f32 vectors, bf16 scalar), 5 and 3 (scalar); T = 1, 17, 1000.
  const int64_t shapes[][2] = {{1, 1536}, {17, 1536}, {1000, 1536}, {17, 8}, {1000, 12}, {17, 5}, {1, 3}};
  uint64_t seed = 3000;
  for (DType dt : compute_dtypes())
    for (const auto& s : shapes)
      for (int64_t offset : {0, 1}) {
        const int64_t rows = s[0], inner = s[1];
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " T=" << rows << " I=" << inner
                                          << " offset=" << offset);
        const Tensor gu = random_normal({rows, 2 * inner}, seed++, 3.f), dy = random_normal({rows, inner}, seed++);
        const Tensor gur = rounded(gu, dt), dyr = rounded(dy, dt);
        const Tolerance tol = output_tolerance(dt, kElementwise);
        // dgate = dy u sig (1 + g (1 - sig)) cancels where g (1 - sig) ~ -1 (g ~ -1.28), so a few ulp of expf's
        // difference become an absolute error of about |dy u| eps there: measured by emulating expf at +-2 ulp
        // over 3M samples of these inputs, 1e-6 covers it (1e-7 does not).
        const Tolerance grad_tol = output_tolerance(dt, {kElementwise.rtol, 1e-6});

        Tensor y_ref = Tensor::empty({rows, inner}, DType::f32);
        ops::swiglu_packed_forward(y_ref, gur);
        Guarded y(Shape{rows, inner}, dt);
        ops::swiglu_packed_forward(y.view(), to_gpu_at_offset(gu, dt, offset));
        EXPECT_TRUE(matches(y, y_ref, tol)) << "y";

        Tensor dgu_ref = Tensor::empty(gu.shape(), DType::f32);
        ops::swiglu_packed_backward(dgu_ref, dyr, gur);
        Guarded dgu(gu.shape(), dt);
        ops::swiglu_packed_backward(dgu.view(), to_gpu_at_offset(dy, dt, offset), to_gpu(gu, dt));
        EXPECT_TRUE(matches(dgu, dgu_ref, grad_tol)) << "dgu";
        // In place: the gradient overwrites the saved projection.
        Guarded in_place(gu, dt);
        ops::swiglu_packed_backward(in_place.view(), to_gpu(dy, dt), in_place.view());
        EXPECT_TRUE(matches(in_place, dgu_ref, grad_tol)) << "dgu in place";
      }
}

}  // namespace
}  // namespace vlm::testing
