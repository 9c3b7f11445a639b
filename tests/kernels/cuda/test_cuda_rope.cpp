// RoPE on CUDA against the CPU reference: general shapes and theta, then the shapes of both CUDA paths: the vector
// one (D/2 a multiple of 8 (bf16) / 4 (f32), a 16-byte aligned x; threads rotate up to 4 heads each, so head counts
// that leave a partial group) and the scalar fallback (other head dims, x starting 1 or 3 elements into its buffer),
// and row-strided x (the q and k heads of a packed projection).
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

TEST(CudaRope, ForwardAndBackwardMatchCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  struct Case {
    int64_t tokens, heads, dim;
    float theta;
  };
  const Case cases[] = {{1, 1, 2, 10000.f}, {3, 2, 6, 10000.f}, {17, 3, 64, 10000.f}, {129, 2, 128, 100000.f},
                        {5, 9, 34, 500.f}};
  uint64_t seed = 300;
  for (DType dt : compute_dtypes())
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " T=" << c.tokens << " H=" << c.heads << " D=" << c.dim);
      const Tensor x = random_normal({c.tokens, c.heads, c.dim}, seed++);
      std::vector<int32_t> pos(static_cast<size_t>(c.tokens));
      for (int64_t t = 0; t < c.tokens; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>((t * 37) % 4099);
      const Tensor positions = i32_tensor(pos), positions_gpu = gpu_i32(pos);
      // Angles up to 4099 rad: f32 cos/sin of large angles agree to a few ulp of the angle's range reduction.
      const Tolerance tol = output_tolerance(dt, {1e-5, 2e-6});
      for (bool backward : {false, true}) {
        Tensor ref = rounded(x, dt);
        Guarded out(x, dt);
        if (backward) {
          ops::rope_backward(ref, positions, c.theta);
          ops::rope_backward(out.view(), positions_gpu, c.theta);
        } else {
          ops::rope_forward(ref, positions, c.theta);
          ops::rope_forward(out.view(), positions_gpu, c.theta);
        }
        EXPECT_TRUE(matches(out, ref, tol)) << (backward ? "backward" : "forward");
      }
    }
}

TEST(CudaRope, VectorAndOffsetPathsMatchCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  struct Case {
    int64_t tokens, heads, dim;
    float theta;
  };
  // The model's q [T, 9, 64] and k [T, 3, 64]; 5 heads (groups of 3 + 2); D = 16 (one bf16 vector per half);
  // D = 12 and 40 (half 6 / 20: scalar for bf16, 20 = 5 f32 vectors); D = 256.
  const Case cases[] = {{37, 9, 64, 100000.f}, {41, 3, 64, 100000.f}, {6, 5, 32, 10000.f}, {3, 2, 16, 10000.f},
                        {4, 1, 12, 10000.f},   {5, 7, 40, 500.f},     {3, 1, 256, 10000.f}};
  uint64_t seed = 700;
  for (DType dt : compute_dtypes())
    for (const Case& c : cases)
      for (int64_t offset : {0, 1, 3, 8}) {
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " T=" << c.tokens << " H=" << c.heads
                                          << " D=" << c.dim << " offset=" << offset);
        const Tensor x = random_normal({c.tokens, c.heads, c.dim}, seed++);
        std::vector<int32_t> pos(static_cast<size_t>(c.tokens));
        for (int64_t t = 0; t < c.tokens; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>((t * 53) % 2048);
        const Tensor positions = i32_tensor(pos), positions_gpu = gpu_i32(pos);
        const Tolerance tol = output_tolerance(dt, {1e-5, 2e-6});
        for (bool backward : {false, true}) {
          Tensor ref = rounded(x, dt), out = to_gpu_at_offset(x, dt, offset);
          if (backward) {
            ops::rope_backward(ref, positions, c.theta);
            ops::rope_backward(out, positions_gpu, c.theta);
          } else {
            ops::rope_forward(ref, positions, c.theta);
            ops::rope_forward(out, positions_gpu, c.theta);
          }
          EXPECT_TRUE(all_close(to_cpu_f32(out), ref, tol.rtol, tol.atol)) << (backward ? "backward" : "forward");
        }
      }
}

// Row-strided x: the q and k heads of a packed projection [T, Hq + 2 Hkv, D], rotated where they lie (as the model
// does on CUDA): the same bits as rotating a contiguous copy of them, and the v heads untouched. Both paths: D = 64
// and 16 take the vector one, D = 12 the scalar one.
// Heads [from, to) of a contiguous CPU f32 [T, H, D], as a contiguous copy.
Tensor heads_of(const Tensor& x, int64_t from, int64_t to) {
  const int64_t tokens = x.dim(0), heads = x.dim(1), dim = x.dim(2);
  Tensor out = Tensor::empty({tokens, to - from, dim}, DType::f32);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = from; h < to; ++h)
      for (int64_t i = 0; i < dim; ++i)
        out.data<float>()[(t * (to - from) + h - from) * dim + i] = x.data<float>()[(t * heads + h) * dim + i];
  return out;
}

TEST(CudaRope, RowStridedHeadsOfAPackedProjection) {
  VLM_SKIP_WITHOUT_CUDA();
  struct Case {
    int64_t tokens, hq, hkv, dim;
  };
  const Case cases[] = {{37, 9, 3, 64}, {5, 2, 1, 16}, {4, 3, 1, 12}};
  uint64_t seed = 760;
  for (DType dt : compute_dtypes())
    for (const Case& c : cases)
      for (bool backward : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " T=" << c.tokens << " Hq=" << c.hq << " Hkv=" << c.hkv
                                          << " D=" << c.dim << (backward ? " backward" : " forward"));
        const int64_t rotated = c.hq + c.hkv, total = c.hq + 2 * c.hkv;
        const Tensor packed = random_normal({c.tokens, total, c.dim}, seed++);
        std::vector<int32_t> pos(static_cast<size_t>(c.tokens));
        for (int64_t t = 0; t < c.tokens; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>((t * 31) % 700);
        const Tensor positions = gpu_i32(pos);
        Tensor gpu = to_gpu(packed, dt);
        Tensor qk = gpu.slice(1, 0, rotated);
        Tensor expect = to_gpu(heads_of(packed, 0, rotated), dt);  // a contiguous copy
        if (backward) {
          ops::rope_backward(qk, positions, 10000.f);
          ops::rope_backward(expect, positions, 10000.f);
        } else {
          ops::rope_forward(qk, positions, 10000.f);
          ops::rope_forward(expect, positions, 10000.f);
        }
        const Tensor after = to_cpu_f32(gpu), before = rounded(packed, dt);
        EXPECT_TRUE(bitwise_equal(heads_of(after, 0, rotated), to_cpu_f32(expect)));
        EXPECT_TRUE(bitwise_equal(heads_of(after, rotated, total), heads_of(before, rotated, total)));
      }
}

// The backward undoes the forward (the transpose of a rotation is its inverse), on the vector path.
TEST(CudaRope, BackwardInvertsForward) {
  VLM_SKIP_WITHOUT_CUDA();
  const Tensor x = random_normal({19, 9, 64}, 750);
  std::vector<int32_t> pos(19);
  for (int32_t t = 0; t < 19; ++t) pos[static_cast<size_t>(t)] = t * 7;
  const Tensor positions = gpu_i32(pos);
  Tensor g = to_gpu(x, DType::f32);
  ops::rope_forward(g, positions, 10000.f);
  ops::rope_backward(g, positions, 10000.f);
  EXPECT_TRUE(all_close(to_cpu_f32(g), x, 1e-5, 1e-6));
}

}  // namespace
}  // namespace vlm::testing
