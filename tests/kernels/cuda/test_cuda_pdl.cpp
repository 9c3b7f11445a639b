// Programmatic dependent launch (kernels/cuda/pdl.cuh) must not change a single bit: chains of dependent ops, each
// kernel reading what the one before it wrote (element-wise, RMSNorm, RoPE in place, FlashAttention's forward,
// cuBLASLt GEMMs, launched without PDL, between ours, and weight gradients on the side stream read by our kernels
// right after the join), give the same bits with PDL forced on as with it off (x, dW and db compared). The
// chains are long and their grids several waves deep, so a kernel that read its input before the previous kernel
// finished would have many chances to show. (Without a device of compute capability 9.0 every run is plain launches.)
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

Tensor run_chain(int pdl, DType dt) {
  ops::cuda::set_pdl_for_testing(pdl);
  constexpr int64_t kSeqs = 8, kLen = 512, kTokens = kSeqs * kLen, kHeads = 9, kDim = 64, kC = kHeads * kDim;
  Tensor x = to_gpu(random_normal({kTokens, kC}, 1), dt), y = to_gpu(random_normal({kTokens, kC}, 2, 0.1f), dt);
  const Tensor w = to_gpu(random_normal({kC}, 3), dt), wm = to_gpu(random_normal({kC, kC}, 4, 0.04f), dt);
  Tensor n = Tensor::empty({kTokens, kC}, dt, x.device()), rstd = Tensor::empty({kTokens}, DType::f32, x.device());
  Tensor out = Tensor::empty({kTokens, kHeads, kDim}, dt, x.device());
  Tensor lse = Tensor::empty({kHeads, kTokens}, DType::f32, x.device());
  std::vector<int32_t> pos(kTokens), cu;
  for (int64_t t = 0; t < kTokens; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(t % kLen);
  for (int64_t s = 0; s <= kSeqs; ++s) cu.push_back(static_cast<int32_t>(s * kLen));
  const Tensor positions = gpu_i32(pos), cu_seqlens = gpu_i32(cu);
  Tensor dx = Tensor::empty({kTokens, kC}, dt, x.device());
  Tensor dw = to_gpu(Tensor::zeros({kC, kC}, DType::f32), DType::f32);
  Tensor db = to_gpu(Tensor::zeros({kC}, DType::f32), DType::f32);
  for (int i = 0; i < 30; ++i) {
    ops::add_inplace(x, y);
    ops::rmsnorm_forward(n, rstd, x, w, 1e-5f);
    Tensor heads = n.view({kTokens, kHeads, kDim});
    ops::rope_forward(heads, positions, 10000.f);
    ops::attention_forward(out, lse, heads, heads, heads, cu_seqlens, cu_seqlens, kLen, kLen, 0.125f, i % 2 == 0);
    ops::matmul(x, out.view({kTokens, kC}), wm, false, true);  // cuBLASLt reads the attention's output
    ops::scale(y, 0.999f);
    {  // weight gradients on the side stream (a cuBLASLt GEMM, then our column sums), joined at the scope's end ...
      const ops::WeightGradOverlap overlap(x.device());
      ops::linear_backward(dx, dw, db, x, n, wm);
    }
    ops::scale(dw, 0.5f);  // ... and read right away by a kernel of ours on the main stream (an event wait before it)
    ops::scale(db, 0.5f);
    ops::add_inplace(y, dx);
  }
  Tensor result = Tensor::empty({kTokens * kC + kC * kC + kC}, DType::f32);
  const Tensor xs = to_cpu_f32(x), dws = to_cpu_f32(dw), dbs = to_cpu_f32(db);
  std::copy_n(xs.data<float>(), xs.numel(), result.data<float>());
  std::copy_n(dws.data<float>(), dws.numel(), result.data<float>() + xs.numel());
  std::copy_n(dbs.data<float>(), dbs.numel(), result.data<float>() + xs.numel() + dws.numel());
  ops::cuda::set_pdl_for_testing(-1);
  return result;
}

TEST(CudaPdl, DependentChainsGiveTheSameBitsWithAndWithout) {
  VLM_SKIP_WITHOUT_CUDA();
  for (DType dt : compute_dtypes()) {
    SCOPED_TRACE(dtype_label(dt));
    const Tensor plain = run_chain(0, dt), with_pdl = run_chain(1, dt);
    EXPECT_TRUE(bitwise_equal(with_pdl, plain));
    EXPECT_TRUE(all_close(plain, plain, 0, 0));  // finite throughout (all_close fails on NaN/inf)
  }
}

}  // namespace
}  // namespace vlm::testing
