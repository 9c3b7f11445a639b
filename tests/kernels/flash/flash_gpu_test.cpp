// FlashAttention kernels against the CPU reference (label gpu; skipped without a CUDA device). For each case of the
// table: forward and backward on random inputs, outputs poisoned with NaN and fenced by guard rows, errors bounded
// by k * err(naive bf16) + floor, and in the deterministic mode two backward runs must be bit-identical.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <limits>

#include "core/device.h"
#include "kernels/cuda/flash/flash_api.h"
#include "kernels/cuda/flash/flash_reference.h"
#include "kernels/flash/flash_test_cases.h"

namespace vlm::flash::testing {
namespace {

constexpr double kFwdK = 2.0;   // out, lse: at most twice the naive bf16 implementation's error
constexpr double kBwdK = 3.0;   // dq, dk, dv
constexpr double kFloorRel = 1e-3;
// Absolute floors: where the exact value is 0 (e.g. dk, dq with a single visible key), only rounding is left.
constexpr double kFwdFloorAbs = 1e-5, kBwdFloorAbs = 1e-4;

struct Inputs {
  RefProblem ref;
  HostTensor q, k, v;
  Tensor q_dev, k_dev, v_dev, packed, cu_q, cu_k;
  int max_q = 0, max_k = 0;
  int64_t tq = 0, tk = 0;
};

Inputs make_inputs(const Case& c, uint64_t seed) {
  Inputs in;
  in.ref.cu_seqlens_q = {0};
  in.ref.cu_seqlens_k = {0};
  for (size_t b = 0; b < c.len_q.size(); ++b) {
    in.ref.cu_seqlens_q.push_back(in.ref.cu_seqlens_q.back() + c.len_q[b]);
    in.ref.cu_seqlens_k.push_back(in.ref.cu_seqlens_k.back() + c.len_k[b]);
    in.max_q = std::max(in.max_q, c.len_q[b]);
    in.max_k = std::max(in.max_k, c.len_k[b]);
  }
  in.ref.n_heads_q = c.n_heads_q;
  in.ref.n_heads_kv = c.n_heads_kv;
  in.ref.head_dim = c.head_dim;
  in.ref.scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));  // the float the kernels get
  in.ref.causal = c.causal;
  in.tq = in.ref.total_q();
  in.tk = in.ref.total_k();
  const int d = c.head_dim, hq = c.n_heads_q, hkv = c.n_heads_kv;
  in.q = random_host(in.tq * hq * d, c.dtype, seed);
  in.k = random_host(in.tk * hkv * d, c.dtype, seed + 1);
  in.v = random_host(in.tk * hkv * d, c.dtype, seed + 2);
  const Device dev = Device::cuda(0);
  if (c.packed_qkv) {
    const int hall = hq + 2 * hkv;
    std::vector<uint16_t> bits(static_cast<size_t>(in.tq * hall * d));
    for (int64_t t = 0; t < in.tq; ++t)
      for (int c0 = 0; c0 < d; ++c0) {
        for (int h = 0; h < hq; ++h) bits[(t * hall + h) * d + c0] = in.q.bits[(t * hq + h) * d + c0];
        for (int h = 0; h < hkv; ++h) {
          bits[(t * hall + hq + h) * d + c0] = in.k.bits[(t * hkv + h) * d + c0];
          bits[(t * hall + hq + hkv + h) * d + c0] = in.v.bits[(t * hkv + h) * d + c0];
        }
      }
    in.packed = upload_bits(bits, {in.tq, hall, d}, c.dtype, dev);
    in.q_dev = in.packed.slice(1, 0, hq);
    in.k_dev = in.packed.slice(1, hq, hq + hkv);
    in.v_dev = in.packed.slice(1, hq + hkv, hall);
  } else {
    in.q_dev = upload_bits(in.q.bits, {in.tq, hq, d}, c.dtype, dev);
    in.k_dev = upload_bits(in.k.bits, {in.tk, hkv, d}, c.dtype, dev);
    in.v_dev = upload_bits(in.v.bits, {in.tk, hkv, d}, c.dtype, dev);
  }
  const int64_t nb = static_cast<int64_t>(c.len_q.size()) + 1;
  in.cu_q = Tensor::from_vector<int32_t>(in.ref.cu_seqlens_q, {nb}).to(dev);
  in.cu_k = Tensor::from_vector<int32_t>(in.ref.cu_seqlens_k, {nb}).to(dev);
  return in;
}

// lse [Hq, Tq] as a column slice of a NaN-filled [Hq, Tq + 2 * guard] f32 buffer (so lse_head_stride != Tq).
struct GuardedLse {
  Tensor buffer, view;
  int64_t tq;
  static constexpr int64_t kGuard = 5;
  GuardedLse(int64_t hq, int64_t tq_) : tq(tq_) {
    buffer = Tensor::full({hq, tq + 2 * kGuard}, std::numeric_limits<float>::quiet_NaN(), Device::cuda(0));
    view = buffer.slice(1, kGuard, kGuard + tq);
  }
  std::vector<double> values(bool* guards_ok) const {
    const std::vector<float> all = download_f32(buffer);
    const int64_t w = tq + 2 * kGuard;
    std::vector<double> out;
    *guards_ok = true;
    for (size_t i = 0; i < all.size(); ++i) {
      const int64_t col = static_cast<int64_t>(i) % w;
      if (col >= kGuard && col < kGuard + tq) {
        out.push_back(all[i]);
      } else if (!std::isnan(all[i])) {
        *guards_ok = false;
      }
    }
    return out;
  }
};

class FlashGpu : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(FlashGpu, MatchesReference) {
  const Case& c = GetParam();
  const uint64_t seed = std::hash<std::string>()(case_name(c)) & 0xffffff;
  Inputs in = make_inputs(c, seed);
  const int d = c.head_dim, hq = c.n_heads_q, hkv = c.n_heads_kv;
  FlashOptions opt;
  opt.scale = static_cast<float>(in.ref.scale);
  opt.causal = c.causal;
  opt.deterministic = c.deterministic;
  opt.path = c.portable ? FlashPath::portable : FlashPath::auto_select;

  // ---- forward
  GuardedOutput out(in.tq, hq, d, c.dtype, Device::cuda(0));
  GuardedLse lse(hq, in.tq);
  Status st = flash_attention_forward(out.view, lse.view, in.q_dev, in.k_dev, in.v_dev, in.cu_q, in.cu_k, in.max_q,
                                      in.max_k, opt);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const size_t nq = static_cast<size_t>(in.tq * hq * d), nk = static_cast<size_t>(in.tk * hkv * d);
  std::vector<double> out_exact(nq), lse_exact(in.tq * hq), out_naive(nq), lse_naive(in.tq * hq);
  attention_ref_forward(in.ref, in.q.values.data(), in.k.values.data(), in.v.values.data(), out_exact.data(),
                        lse_exact.data(), RefMode::exact);
  attention_ref_forward(in.ref, in.q.values.data(), in.k.values.data(), in.v.values.data(), out_naive.data(),
                        lse_naive.data(), RefMode::naive_bf16);
  const std::vector<double> out_ours = out.values();
  bool lse_guards_ok = false;
  const std::vector<double> lse_ours = lse.values(&lse_guards_ok);
  EXPECT_TRUE(out.check_guards());
  EXPECT_TRUE(lse_guards_ok) << "lse guard columns were written";
  EXPECT_TRUE(within_naive_bound("out", out_ours, out_exact, out_naive, kFwdK, kFloorRel, kFwdFloorAbs));
  EXPECT_TRUE(within_naive_bound("lse", lse_ours, lse_exact, lse_naive, kFwdK, kFloorRel, kFwdFloorAbs));

  // ---- backward, from our own out and lse
  HostTensor dout = random_host(static_cast<int64_t>(nq), c.dtype, seed + 3);
  Tensor dout_dev = upload_bits(dout.bits, {in.tq, hq, d}, c.dtype, Device::cuda(0));
  auto run_bwd = [&](GuardedOutput& dq, GuardedOutput& dk, GuardedOutput& dv) {
    Status s = flash_attention_backward(dq.view, dk.view, dv.view, dout_dev, in.q_dev, in.k_dev, in.v_dev, out.view,
                                        lse.view, in.cu_q, in.cu_k, in.max_q, in.max_k, opt);
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  };
  GuardedOutput dq(in.tq, hq, d, c.dtype, Device::cuda(0)), dk(in.tk, hkv, d, c.dtype, Device::cuda(0)),
      dv(in.tk, hkv, d, c.dtype, Device::cuda(0));
  run_bwd(dq, dk, dv);

  std::vector<double> dq_exact(nq), dk_exact(nk), dv_exact(nk), dq_naive(nq), dk_naive(nk), dv_naive(nk);
  attention_ref_backward(in.ref, in.q.values.data(), in.k.values.data(), in.v.values.data(), out_exact.data(),
                         lse_exact.data(), dout.values.data(), dq_exact.data(), dk_exact.data(), dv_exact.data(),
                         RefMode::exact);
  attention_ref_backward(in.ref, in.q.values.data(), in.k.values.data(), in.v.values.data(), out_naive.data(),
                         lse_naive.data(), dout.values.data(), dq_naive.data(), dk_naive.data(), dv_naive.data(),
                         RefMode::naive_bf16);
  EXPECT_TRUE(dq.check_guards());
  EXPECT_TRUE(dk.check_guards());
  EXPECT_TRUE(dv.check_guards());
  EXPECT_TRUE(within_naive_bound("dq", dq.values(), dq_exact, dq_naive, kBwdK, kFloorRel, kBwdFloorAbs));
  EXPECT_TRUE(within_naive_bound("dk", dk.values(), dk_exact, dk_naive, kBwdK, kFloorRel, kBwdFloorAbs));
  EXPECT_TRUE(within_naive_bound("dv", dv.values(), dv_exact, dv_naive, kBwdK, kFloorRel, kBwdFloorAbs));

  if (c.deterministic) {
    GuardedOutput dq2(in.tq, hq, d, c.dtype, Device::cuda(0)), dk2(in.tk, hkv, d, c.dtype, Device::cuda(0)),
        dv2(in.tk, hkv, d, c.dtype, Device::cuda(0));
    run_bwd(dq2, dk2, dv2);
    EXPECT_EQ(dq.bits(), dq2.bits()) << "deterministic dq differs between runs";
    EXPECT_EQ(dk.bits(), dk2.bits()) << "deterministic dk differs between runs";
    EXPECT_EQ(dv.bits(), dv2.bits()) << "deterministic dv differs between runs";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashGpu, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// ---- input validation (needs a device for the CUDA tensors) -------------------------------------------------------

class FlashGpuApi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  }
  Status forward(int64_t hq, int64_t hkv, int64_t d, DType dtype, Device dev = Device::cuda(0)) {
    Tensor q = Tensor::zeros({4, hq, d}, dtype, dev), k = Tensor::zeros({4, hkv, d}, dtype, dev);
    Tensor v = Tensor::zeros({4, hkv, d}, dtype, dev), out = Tensor::zeros({4, hq, d}, dtype, dev);
    Tensor lse = Tensor::zeros({hq, 4}, DType::f32, dev);
    Tensor cu = Tensor::from_vector<int32_t>({0, 4}, {2}).to(dev);
    return flash_attention_forward(out, lse, q, k, v, cu, cu, 4, 4, FlashOptions{});
  }
};

TEST_F(FlashGpuApi, RejectsBadInputsWithAStatus) {
  EXPECT_TRUE(forward(4, 2, 64, DType::bf16).ok());
  EXPECT_EQ(forward(4, 3, 64, DType::bf16).code(), StatusCode::invalid_argument);  // Hq % Hkv != 0
  EXPECT_EQ(forward(4, 4, 100, DType::bf16).code(), StatusCode::unsupported);      // not a multiple of 8
  EXPECT_EQ(forward(4, 4, 264, DType::bf16).code(), StatusCode::unsupported);      // above 256
  EXPECT_EQ(forward(4, 4, 64, DType::f32).code(), StatusCode::invalid_argument);   // dtype
  EXPECT_EQ(forward(4, 4, 64, DType::bf16, Device::cpu()).code(), StatusCode::invalid_argument);
  FlashFwdParams p;  // null pointers
  p.batch = 1;
  p.n_heads_q = p.n_heads_kv = 1;
  p.head_dim = 64;
  p.scale = 0.125f;
  EXPECT_FALSE(flash_fwd(p, nullptr).ok());
}

// The Hopper forward's causal tiles come from a counter per device and stream (rows over 256 keys), which each launch
// leaves at zero for the next with no memset: launches back to back on one stream, interleaved with a second stream,
// must give bit-identical outputs (a tile's result does not depend on which CTA computes it), and match the
// reference. On other GPUs this checks the portable path's repeatability.
TEST_F(FlashGpuApi, RepeatedCausalLaunchesAgreeOnTwoStreams) {
  Case c;
  c.head_dim = 128;
  c.n_heads_q = 6;
  c.n_heads_kv = 2;
  c.len_q = c.len_k = {1000, 700, 1300};
  c.causal = true;
  Inputs in = make_inputs(c, 1234);
  FlashOptions opt;
  opt.causal = true;
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  std::vector<std::vector<uint16_t>> runs;
  for (cudaStream_t stream : {cudaStream_t{nullptr}, cudaStream_t{nullptr}, side, cudaStream_t{nullptr}, side}) {
    GuardedOutput out(in.tq, c.n_heads_q, c.head_dim, c.dtype, Device::cuda(0));
    GuardedLse lse(c.n_heads_q, in.tq);
    Status st = flash_attention_forward(out.view, lse.view, in.q_dev, in.k_dev, in.v_dev, in.cu_q, in.cu_k, in.max_q,
                                        in.max_k, opt, stream);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(out.check_guards());
    runs.push_back(out.bits());
    if (runs.size() == 1) {
      const size_t n = static_cast<size_t>(in.tq * c.n_heads_q * c.head_dim);
      std::vector<double> exact(n), naive(n), lse_exact(in.tq * c.n_heads_q), lse_naive(in.tq * c.n_heads_q);
      attention_ref_forward(in.ref, in.q.values.data(), in.k.values.data(), in.v.values.data(), exact.data(),
                            lse_exact.data(), RefMode::exact);
      attention_ref_forward(in.ref, in.q.values.data(), in.k.values.data(), in.v.values.data(), naive.data(),
                            lse_naive.data(), RefMode::naive_bf16);
      EXPECT_TRUE(within_naive_bound("out", out.values(), exact, naive, kFwdK, kFloorRel, kFwdFloorAbs));
    } else {
      EXPECT_EQ(runs.front(), runs.back()) << "launch " << runs.size() << " differs from the first";
    }
  }
  ASSERT_EQ(cudaStreamDestroy(side), cudaSuccess);
}

}  // namespace
}  // namespace vlm::flash::testing
