// The C ABI (flash_c_api.h, libvlm_flash_c.so): its argument checks on any machine, and on a GPU (its gpu cases skip
// without one) a dense grouped-query problem forward and backward against the float64 reference, with the outputs
// poisoned with NaN first so that an element left unwritten fails.
#include "kernels/cuda/flash/flash_c_api.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/device.h"
#include "kernels/cuda/flash/flash_reference.h"
#include "kernels/flash/flash_test_cases.h"

namespace vlm::flash::testing {
namespace {

VlmFlashDense dense(int batch, int seqlen, int hq, int hkv, int d, bool causal) {
  VlmFlashDense s{};
  s.batch = batch;
  s.seqlen_q = s.seqlen_k = seqlen;
  s.heads_q = hq;
  s.heads_kv = hkv;
  s.head_dim = d;
  s.causal = causal ? 1 : 0;
  return s;
}

bool last_error_has(const std::string& what) {
  return std::string(vlm_flash_last_error()).find(what) != std::string::npos;
}

TEST(FlashCApi, RejectsNullAndNonPositiveShapes) {
  EXPECT_NE(vlm_flash_fwd_dense(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr), 0);
  EXPECT_TRUE(last_error_has("shape is null")) << vlm_flash_last_error();
  VlmFlashDense s = dense(2, 0, 4, 4, 64, false);
  EXPECT_NE(vlm_flash_bwd_dense(&s, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                nullptr, 0, nullptr),
            0);
  EXPECT_TRUE(last_error_has("must be positive")) << vlm_flash_last_error();
  EXPECT_EQ(vlm_flash_bwd_workspace_bytes(&s), 0u);
  EXPECT_EQ(vlm_flash_bwd_workspace_bytes(nullptr), 0u);
}

TEST(FlashCApi, RejectsAShortWorkspace) {
  VlmFlashDense s = dense(2, 100, 4, 2, 64, true);
  const size_t need = vlm_flash_bwd_workspace_bytes(&s);
  ASSERT_GT(need, 0u);
  int dummy = 0;
  EXPECT_NE(vlm_flash_bwd_dense(&s, &dummy, &dummy, &dummy, &dummy, &dummy, nullptr, &dummy, &dummy, &dummy, &dummy,
                                need - 1, nullptr),
            0);
  EXPECT_TRUE(last_error_has("workspace of")) << vlm_flash_last_error();
}

TEST(FlashCApi, RejectsAnUnsupportedHeadRatio) {
  VlmFlashDense s = dense(1, 16, 6, 4, 64, false);  // 6 q heads over 4 kv heads
  int dummy = 0;
  EXPECT_NE(vlm_flash_fwd_dense(&s, &dummy, &dummy, &dummy, &dummy, nullptr, nullptr), 0);
  EXPECT_FALSE(std::string(vlm_flash_last_error()).empty());
}

class FlashCApiGpu : public ::testing::TestWithParam<bool> {};

TEST_P(FlashCApiGpu, DenseGqaMatchesTheReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const bool causal = GetParam();
  const int b = 2, s = 77, hq = 6, hkv = 2, d = 64;
  const int64_t t = static_cast<int64_t>(b) * s;
  RefProblem ref;
  ref.cu_seqlens_q = ref.cu_seqlens_k = {0, s, 2 * s};
  ref.n_heads_q = hq;
  ref.n_heads_kv = hkv;
  ref.head_dim = d;
  ref.scale = 1.f / std::sqrt(static_cast<float>(d));  // the float the kernels get
  ref.causal = causal;
  const HostTensor q = random_host(t * hq * d, DType::bf16, 11), k = random_host(t * hkv * d, DType::bf16, 12),
                   v = random_host(t * hkv * d, DType::bf16, 13), dout = random_host(t * hq * d, DType::bf16, 14);
  const Device dev = Device::cuda(0);
  const Tensor q_d = upload_bits(q.bits, {t, hq, d}, DType::bf16, dev);
  const Tensor k_d = upload_bits(k.bits, {t, hkv, d}, DType::bf16, dev);
  const Tensor v_d = upload_bits(v.bits, {t, hkv, d}, DType::bf16, dev);
  const Tensor do_d = upload_bits(dout.bits, {t, hq, d}, DType::bf16, dev);
  const Tensor cu = Tensor::from_vector<int32_t>(ref.cu_seqlens_q, {3}).to(dev);
  GuardedOutput out(t, hq, d, DType::bf16, dev), dq(t, hq, d, DType::bf16, dev), dk(t, hkv, d, DType::bf16, dev),
      dv(t, hkv, d, DType::bf16, dev);
  Tensor lse = Tensor::full({hq, t}, std::nanf(""), dev);
  VlmFlashDense shape = dense(b, s, hq, hkv, d, causal);
  shape.cu_seqlens_q = shape.cu_seqlens_k = cu.data<int32_t>();
  ASSERT_EQ(vlm_flash_fwd_dense(&shape, q_d.raw_data(), k_d.raw_data(), v_d.raw_data(), out.view.raw_data(),
                                lse.data<float>(), nullptr),
            0)
      << vlm_flash_last_error();
  // A null workspace: the library allocates its own.
  ASSERT_EQ(vlm_flash_bwd_dense(&shape, q_d.raw_data(), k_d.raw_data(), v_d.raw_data(), out.view.raw_data(),
                                do_d.raw_data(), lse.data<float>(), dq.view.raw_data(), dk.view.raw_data(),
                                dv.view.raw_data(), nullptr, 0, nullptr),
            0)
      << vlm_flash_last_error();

  std::vector<double> o_exact(t * hq * d), lse_exact(hq * t), o_naive(t * hq * d), lse_naive(hq * t);
  attention_ref_forward(ref, q.values.data(), k.values.data(), v.values.data(), o_exact.data(), lse_exact.data(),
                        RefMode::exact);
  attention_ref_forward(ref, q.values.data(), k.values.data(), v.values.data(), o_naive.data(), lse_naive.data(),
                        RefMode::naive_bf16);
  EXPECT_TRUE(within_naive_bound("out", out.values(), o_exact, o_naive, 2.0, 1e-3, 1e-5));
  std::vector<double> lse_ours;
  for (float x : download_f32(lse)) lse_ours.push_back(x);
  EXPECT_TRUE(within_naive_bound("lse", lse_ours, lse_exact, lse_naive, 2.0, 1e-3, 1e-5));

  std::vector<double> dq_e(t * hq * d), dk_e(t * hkv * d), dv_e(t * hkv * d), dq_n(dq_e.size()), dk_n(dk_e.size()),
      dv_n(dv_e.size());
  attention_ref_backward(ref, q.values.data(), k.values.data(), v.values.data(), o_exact.data(), lse_exact.data(),
                         dout.values.data(), dq_e.data(), dk_e.data(), dv_e.data(), RefMode::exact);
  attention_ref_backward(ref, q.values.data(), k.values.data(), v.values.data(), o_naive.data(), lse_naive.data(),
                         dout.values.data(), dq_n.data(), dk_n.data(), dv_n.data(), RefMode::naive_bf16);
  EXPECT_TRUE(within_naive_bound("dq", dq.values(), dq_e, dq_n, 3.0, 1e-3, 1e-4));
  EXPECT_TRUE(within_naive_bound("dk", dk.values(), dk_e, dk_n, 3.0, 1e-3, 1e-4));
  EXPECT_TRUE(within_naive_bound("dv", dv.values(), dv_e, dv_n, 3.0, 1e-3, 1e-4));
  for (const GuardedOutput* g : {&out, &dq, &dk, &dv}) EXPECT_TRUE(g->check_guards());
}

INSTANTIATE_TEST_SUITE_P(CausalAndNot, FlashCApiGpu, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "causal" : "noncausal"; });

}  // namespace
}  // namespace vlm::flash::testing
