// The fused_linear family on CUDA against the CPU composition it fuses: rmsnorm_linear_forward (compute-dtype and f32
// outputs, with and without a bias) and rmsnorm_linear_swiglu_forward, f32 and bf16, at 1 to 8 rows (the GEMV of
// cuda/gemv.cu, also with a grid that loops over columns: the LM head's width), at more rows and on shapes the GEMV
// declines (row width not a multiple of 16 bytes, a misaligned x) where the composition runs; repeated calls are
// bit-identical. linear_forward / linear_add_forward at few rows (the GEMV behind them) against the CPU, with a
// residual as large as the product so a lost addend cannot hide.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

constexpr float kEps = 1e-5f;

Tolerance dot_tolerance(int64_t k) { return {1e-5, 3e-7 * static_cast<double>(std::max<int64_t>(k, 1))}; }

// The normalized rows as the GPU's product reads them: rmsnorm of the rounded x, rounded to the compute dtype.
Tensor normalized_rows(const Tensor& x, const Tensor& g, DType dt) {
  Tensor n = Tensor::empty(x.shape(), DType::f32), none;
  ops::rmsnorm_forward(n, none, rounded(x, dt), rounded(g, dt), kEps);
  return rounded(n, dt);
}

struct Case {
  int64_t rows, in, out;
  bool bias;
  int64_t x_offset = 0;  // elements: an offset that is not a multiple of 16 bytes misaligns x
};

const Case kCases[] = {{1, 64, 24, false},   {2, 576, 96, true},  {3, 40, 7, false},    {4, 128, 130, true},
                       {5, 576, 960, false}, {8, 256, 33, true},  {8, 64, 20000, false}, {1, 576, 49152, false},
                       {9, 64, 24, true},    {16, 576, 96, false}, {3, 36, 12, true},   {2, 64, 24, false, 3}};

TEST(CudaFusedLinear, RmsnormLinearMatchesCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 1;
  for (DType dt : compute_dtypes())
    for (const Case& c : kCases)
      for (bool f32_out : {false, true}) {
        if (f32_out && dt == DType::f32) continue;
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " rows " << c.rows << " in " << c.in << " out "
                                        << c.out << (c.bias ? " bias" : "") << (f32_out ? " f32 y" : "")
                                        << " x offset " << c.x_offset);
        const Tensor x = random_normal({c.rows, c.in}, seed++), g = random_normal({c.in}, seed++);
        const Tensor w = random_normal({c.out, c.in}, seed++);
        const Tensor b = c.bias ? random_normal({c.out}, seed++) : Tensor();
        Tensor ref = Tensor::empty({c.rows, c.out}, DType::f32);
        ops::linear_forward(ref, normalized_rows(x, g, dt), rounded(w, dt), c.bias ? rounded(b, dt) : Tensor());
        const DType out_dt = f32_out ? DType::f32 : dt;
        Guarded y(Shape{c.rows, c.out}, out_dt);
        const Tensor xg = to_gpu_at_offset(x, dt, c.x_offset), gg = to_gpu(g, dt), wg = to_gpu(w, dt);
        const Tensor bg = c.bias ? to_gpu(b, dt) : Tensor();
        ops::rmsnorm_linear_forward(y.view(), xg, gg, kEps, wg, bg);
        EXPECT_TRUE(matches(y, ref, output_tolerance(dt, dot_tolerance(c.in))));
        Guarded again(Shape{c.rows, c.out}, out_dt);
        ops::rmsnorm_linear_forward(again.view(), xg, gg, kEps, wg, bg);
        EXPECT_TRUE(bitwise_equal(to_cpu_f32(again.view()), to_cpu_f32(y.view())));
      }
}

TEST(CudaFusedLinear, RmsnormLinearSwigluMatchesCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 1000;
  for (DType dt : compute_dtypes())
    for (const Case& c : kCases) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " rows " << c.rows << " in " << c.in << " inter "
                                      << c.out << (c.bias ? " bias" : "") << " x offset " << c.x_offset);
      const Tensor x = random_normal({c.rows, c.in}, seed++), g = random_normal({c.in}, seed++);
      const Tensor w = random_normal({2 * c.out, c.in}, seed++);
      const Tensor b = c.bias ? random_normal({2 * c.out}, seed++) : Tensor();
      Tensor gate_up = Tensor::empty({c.rows, 2 * c.out}, DType::f32);
      ops::linear_forward(gate_up, normalized_rows(x, g, dt), rounded(w, dt), c.bias ? rounded(b, dt) : Tensor());
      const Tensor gu = rounded(gate_up, dt);  // the packed projection as the compute dtype holds it
      Tensor ref = Tensor::empty({c.rows, c.out}, DType::f32);
      ops::swiglu_packed_forward(ref, gu);
      Guarded y(Shape{c.rows, c.out}, dt);
      ops::rmsnorm_linear_swiglu_forward(y.view(), to_gpu_at_offset(x, dt, c.x_offset), to_gpu(g, dt), kEps,
                                         to_gpu(w, dt), c.bias ? to_gpu(b, dt) : Tensor());
      // The products' summation order moves each of gate and up by the dot tolerance, and in bf16 their rounding
      // can then land on the neighbouring value (one ulp, relative 2^-7); silu(g) * u passes a change of g on with
      // silu'(g) (|silu'| < 1.1) times u, and a change of u with silu(g) (|silu(g)| <= |g|).
      // Past kGemvMaxRows the composition runs, and cuBLASLt may split a bf16 GEMM's K and round each partial sum to
      // bf16: a few ulps of the partials' size (about sqrt(in) for these inputs) on gate and up (measured on an
      // H100: 0.097 at 16 rows x 576, where the GEMV's one rounding stays within the bound without it).
      const Tolerance dot = dot_tolerance(c.in);
      const int64_t inter = c.out;
      const double ulp = dt == DType::bf16 ? 2.02 * kBf16HalfUlp : 0.0;
      const double split_k =
          dt == DType::bf16 && c.rows > 8 ? 8 * kBf16HalfUlp * std::sqrt(static_cast<double>(c.in)) : 0.0;
      EXPECT_TRUE(close_within(y.view(), ref, [&](int64_t i, double expected) {
        const int64_t r = i / inter, j = i % inter;
        const double gate = std::fabs(gu.data<float>()[r * 2 * inter + j]);
        const double up = std::fabs(gu.data<float>()[r * 2 * inter + inter + j]);
        const double d_gate = dot.rtol * gate + dot.atol + ulp * gate + split_k;
        const double d_up = dot.rtol * up + dot.atol + ulp * up + split_k;
        return 1.1 * up * d_gate + gate * d_up + d_gate * d_up +
               (dt == DType::bf16 ? 1.01 * kBf16HalfUlp * std::fabs(expected) : 1e-6 * std::fabs(expected));
      }));
      EXPECT_TRUE(y.guards_intact());
    }
}

// The GEMV behind linear_forward / linear_add_forward at few rows: SmolLM2-135M's decode shapes and small odd ones.
TEST(CudaFusedLinear, FewRowLinearAndResidualMatchCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 2000;
  const Case kFew[] = {{1, 576, 576, false}, {4, 1536, 576, true}, {8, 576, 1536, false}, {7, 48, 5, true}};
  for (DType dt : compute_dtypes())
    for (const Case& c : kFew) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " rows " << c.rows << " in " << c.in << " out "
                                      << c.out << (c.bias ? " bias" : ""));
      const Tensor x = random_normal({c.rows, c.in}, seed++), w = random_normal({c.out, c.in}, seed++);
      const Tensor b = c.bias ? random_normal({c.out}, seed++) : Tensor();
      const Tensor residual = random_normal({c.rows, c.out}, seed++, std::sqrt(static_cast<float>(c.in)));
      const Tensor xr = rounded(x, dt), wr = rounded(w, dt), br = c.bias ? rounded(b, dt) : Tensor();
      Tensor ref = Tensor::empty({c.rows, c.out}, DType::f32), ref_sum = Tensor::empty({c.rows, c.out}, DType::f32);
      ops::linear_forward(ref, xr, wr, br);
      ops::linear_add_forward(ref_sum, xr, wr, br, rounded(residual, dt));
      const Tensor xg = to_gpu(x, dt), wg = to_gpu(w, dt), bg = c.bias ? to_gpu(b, dt) : Tensor();
      Guarded y(Shape{c.rows, c.out}, dt), sum(Shape{c.rows, c.out}, dt);
      ops::linear_forward(y.view(), xg, wg, bg);
      ops::linear_add_forward(sum.view(), xg, wg, bg, to_gpu(residual, dt));
      const Tolerance tol = output_tolerance(dt, dot_tolerance(c.in));
      EXPECT_TRUE(matches(y, ref, tol));
      EXPECT_TRUE(matches(sum, ref_sum, tol));
    }
}

// rmsnorm_qkv_paged_write (the GEMV's QKV epilogue: RoPE and the paged write) against the CPU composition: q, and the
// whole caches (rows of other slots must keep their values), SmolLM2-135M's heads and a small odd shape, with and
// without RoPE, a padding row (slot -1); more rows than the GEMV takes run the composition on the GPU.
TEST(CudaFusedLinear, RmsnormQkvPagedWriteMatchesCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  struct QkvCase {
    int64_t rows, in, heads_q, heads_kv, dim;
  };
  const QkvCase kQkv[] = {{1, 576, 9, 3, 64}, {3, 576, 9, 3, 64}, {8, 64, 4, 2, 16}, {12, 64, 4, 2, 16}};
  uint64_t seed = 3000;
  for (DType dt : compute_dtypes())
    for (const QkvCase& c : kQkv)
      for (float theta : {10000.f, 0.f}) {
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " rows " << c.rows << " in " << c.in << " heads "
                                        << c.heads_q << "/" << c.heads_kv << " dim " << c.dim << " theta " << theta);
        const int64_t out = (c.heads_q + 2 * c.heads_kv) * c.dim, blocks = 4, block_size = 16;
        const Tensor x = random_normal({c.rows, c.in}, seed++), g = random_normal({c.in}, seed++);
        const Tensor w = random_normal({out, c.in}, seed++), b = random_normal({out}, seed++);
        const Tensor k0 = random_normal({blocks, block_size, c.heads_kv, c.dim}, seed++);
        const Tensor v0 = random_normal(k0.shape(), seed++);
        std::vector<int32_t> pos, slots;
        for (int64_t r = 0; r < c.rows; ++r) {
          pos.push_back(static_cast<int32_t>(100 + 7 * r));
          slots.push_back(r == 1 ? -1 : static_cast<int32_t>((5 * r + 3) % (blocks * block_size)));
        }
        // The reference: the products as the compute dtype holds them, then the CPU split and write.
        Tensor qkv = Tensor::empty({c.rows, out}, DType::f32);
        ops::linear_forward(qkv, normalized_rows(x, g, dt), rounded(w, dt), rounded(b, dt));
        Tensor q_ref = Tensor::empty({c.rows, c.heads_q, c.dim}, DType::f32);
        Tensor k_ref = rounded(k0, dt), v_ref = rounded(v0, dt);
        ops::qkv_split_paged_write(q_ref, k_ref, v_ref, rounded(qkv, dt), i32_tensor(pos), i32_tensor(slots), theta);
        Guarded q(Shape{c.rows, c.heads_q, c.dim}, dt), k(k0, dt), v(v0, dt);
        ops::rmsnorm_qkv_paged_write(q.view(), k.view(), v.view(), to_gpu(x, dt), to_gpu(g, dt), kEps, to_gpu(w, dt),
                                     to_gpu(b, dt), gpu_i32(pos), gpu_i32(slots), theta);
        ASSERT_TRUE(ops::check_index_errors(gpu()).ok());
        // A product may land one ulp of the compute dtype (or the dot tolerance) from the reference's; a rotation
        // mixes two of them: bounded by that much of the largest value.
        const double rel_max = dt == DType::bf16 ? 4 * kBf16HalfUlp : 1e-5;
        EXPECT_TRUE(close_scaled(q, q_ref, 1e-5, rel_max, 3e-7 * static_cast<double>(c.in)));
        EXPECT_TRUE(close_scaled(k, k_ref, 1e-5, rel_max, 3e-7 * static_cast<double>(c.in)));
        EXPECT_TRUE(close_scaled(v, v_ref, 1e-5, rel_max, 3e-7 * static_cast<double>(c.in)));
      }
}

TEST(CudaFusedLinear, RmsnormQkvPagedWriteRecordsABadSlot) {
  VLM_SKIP_WITHOUT_CUDA();
  ASSERT_TRUE(ops::check_index_errors(gpu()).ok());
  const Tensor x = random_normal({3, 64}, 1), g = random_normal({64}, 2), w = random_normal({(4 + 4) * 16, 64}, 3);
  Tensor q = Tensor::empty({3, 4, 16}, DType::f32, gpu());
  Tensor k = Tensor::zeros({2, 16, 2, 16}, DType::f32, gpu()), v = Tensor::zeros({2, 16, 2, 16}, DType::f32, gpu());
  ops::rmsnorm_qkv_paged_write(q, k, v, to_gpu(x, DType::f32), to_gpu(g, DType::f32), kEps, to_gpu(w, DType::f32),
                               Tensor(), gpu_i32({0, 1, 2}), gpu_i32({3, 1000, 7}), 10000.f);
  const Status s = ops::check_index_errors(gpu());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("(slot_mapping): entry 1 = 1000 is outside [-1, 32)"), std::string::npos) << s.message();
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

}  // namespace
}  // namespace vlm::testing
