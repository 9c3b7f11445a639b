// Attention on CUDA against the CPU reference op: varlen, GQA/MQA, causal (bottom-right) and not, Lq != Lk, empty
// sequences and rows that see no key (out 0, lse -inf, dq 0), odd head dims. f32 runs the simple CUDA kernels
// (tight tolerances); bf16 runs FlashAttention where it applies (head dims multiple of 8) and the simple kernels
// otherwise (or everywhere with ops::set_attention_flash(false)), with tolerances designed from bf16: flash rounds P
// and dS to bf16 for its tensor-core matmuls, so each output carries a few bf16 half-ulps relative to the magnitude of
// what it sums.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>

#include "cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"
#include "testing/attention_determinism.h"

namespace vlm::testing {
namespace {

struct AttnCase {
  const char* name;
  std::vector<int32_t> lens_q, lens_k;
  int64_t heads_q, heads_kv, dim;
};

const AttnCase kCases[] = {
    {"single", {5}, {5}, 2, 2, 4},
    {"gqa", {3, 7, 1}, {3, 7, 1}, 4, 2, 8},
    {"mqa_lq_ne_lk", {2, 5}, {6, 3}, 4, 1, 16},
    {"empty_sequences", {0, 4, 3}, {2, 0, 5}, 2, 2, 6},
    {"odd_dim", {9, 2}, {9, 4}, 3, 1, 17},
    {"d40", {20}, {31}, 2, 2, 40},
    {"d64", {17, 33, 1}, {17, 40, 1}, 4, 2, 64},
    {"d128", {65, 70}, {65, 70}, 2, 1, 128},
};

std::vector<int32_t> cumulative(const std::vector<int32_t>& lens) {
  std::vector<int32_t> cu(lens.size() + 1, 0);
  std::partial_sum(lens.begin(), lens.end(), cu.begin() + 1);
  return cu;
}

// lse: -inf exactly where the reference has -inf (rows that see no key), close elsewhere.
::testing::AssertionResult lse_matches(const Guarded& actual, const Tensor& expected, double atol) {
  const Tensor a = to_cpu_f32(actual.view());
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<float>()[i], e = expected.data<float>()[i];
    const bool ok = std::isinf(e) ? (std::isinf(x) && x < 0) : std::fabs(x - e) <= atol + 1e-5 * std::fabs(e);
    if (!ok) return ::testing::AssertionFailure() << "lse[" << i << "] = " << x << ", expected " << e;
  }
  return actual.guards_intact();
}

// Every case on the default path (FlashAttention for bf16 where it applies) and with flash turned off
// (ops::set_attention_flash(false): the simple kernels for every problem, the baseline `vlm bench train --attention
// simple` measures).
TEST(CudaAttention, ForwardAndBackwardMatchCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 1;
  for (bool flash : {true, false})
    for (DType dt : compute_dtypes())
      for (const AttnCase& c : kCases)
        for (bool causal : {false, true}) {
          if (!flash && dt != DType::bf16) continue;  // f32 never takes flash: the first pass ran its cases
          const AttentionFlashScope path(flash);
          SCOPED_TRACE(::testing::Message() << (flash ? "flash " : "simple ") << dtype_label(dt) << " " << c.name
                                            << (causal ? " causal" : ""));
          const bool bf16 = dt == DType::bf16;
          const std::vector<int32_t> cu_q = cumulative(c.lens_q), cu_k = cumulative(c.lens_k);
          const int64_t tq = cu_q.back(), tk = cu_k.back();
          const int max_q = *std::max_element(c.lens_q.begin(), c.lens_q.end());
          const int max_k = *std::max_element(c.lens_k.begin(), c.lens_k.end());
          const float scale = 1.f / std::sqrt(static_cast<float>(c.dim));
          const Tensor q = random_normal({tq, c.heads_q, c.dim}, seed++);
          const Tensor k = random_normal({tk, c.heads_kv, c.dim}, seed++);
          const Tensor v = random_normal({tk, c.heads_kv, c.dim}, seed++), dout = random_normal(q.shape(), seed++);
          const Tensor qr = rounded(q, dt), kr = rounded(k, dt), vr = rounded(v, dt), doutr = rounded(dout, dt);
          const Tensor cpu_cu_q = i32_tensor(cu_q), cpu_cu_k = i32_tensor(cu_k);
          const Tensor gpu_cu_q = gpu_i32(cu_q), gpu_cu_k = gpu_i32(cu_k);

          Tensor ref_out = Tensor::empty(q.shape(), DType::f32), ref_lse = Tensor::empty({c.heads_q, tq}, DType::f32);
          ops::attention_forward(ref_out, ref_lse, qr, kr, vr, cpu_cu_q, cpu_cu_k, max_q, max_k, scale, causal);
          Guarded out(q.shape(), dt), lse(Shape{c.heads_q, tq}, DType::f32);
          const Tensor qg = to_gpu(q, dt), kg = to_gpu(k, dt), vg = to_gpu(v, dt);
          ops::attention_forward(out.view(), lse.view(), qg, kg, vg, gpu_cu_q, gpu_cu_k, max_q, max_k, scale, causal);
          EXPECT_TRUE(close_scaled(out, ref_out, bf16 ? 4 * kBf16HalfUlp : 1e-5, bf16 ? 2 * kBf16HalfUlp : 0, 1e-6));
          EXPECT_TRUE(lse_matches(lse, ref_lse, bf16 ? 1e-4 : 1e-5));

          Tensor ref_dq = Tensor::empty(q.shape(), DType::f32), ref_dk = Tensor::empty(k.shape(), DType::f32);
          Tensor ref_dv = Tensor::empty(k.shape(), DType::f32);
          ops::attention_backward(ref_dq, ref_dk, ref_dv, doutr, qr, kr, vr, ref_out, ref_lse, cpu_cu_q, cpu_cu_k,
                                  max_q, max_k, scale, causal);
          Guarded dq(q.shape(), dt), dk(k.shape(), dt), dv(k.shape(), dt);
          const Tensor doutg = to_gpu(dout, dt);
          ops::attention_backward(dq.view(), dk.view(), dv.view(), doutg, qg, kg, vg, out.view(), lse.view(), gpu_cu_q,
                                  gpu_cu_k, max_q, max_k, scale, causal);
          const double rtol = bf16 ? 4 * kBf16HalfUlp : 1e-4, rel_max = bf16 ? 4 * kBf16HalfUlp : 1e-5;
          EXPECT_TRUE(close_scaled(dq, ref_dq, rtol, rel_max, 1e-6)) << "dq";
          EXPECT_TRUE(close_scaled(dk, ref_dk, rtol, rel_max, 1e-6)) << "dk";
          EXPECT_TRUE(close_scaled(dv, ref_dv, rtol, rel_max, 1e-6)) << "dv";

          // Gradients not needed are skipped; the others are unchanged.
          Tensor none;
          Guarded dk_only(k.shape(), dt);
          ops::attention_backward(none, dk_only.view(), none, doutg, qg, kg, vg, out.view(), lse.view(), gpu_cu_q,
                                  gpu_cu_k, max_q, max_k, scale, causal);
          EXPECT_TRUE(close_scaled(dk_only, ref_dk, rtol, rel_max, 1e-6)) << "dk alone";
        }
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

TEST(CudaAttention, BackwardIsBitwiseReproducible) {
  VLM_SKIP_WITHOUT_CUDA();
  const AttentionDeterminismScope deterministic(true);  // the guarantee under test (not the default)
  const std::vector<int32_t> cu = {0, 40, 97};
  for (DType dt : compute_dtypes())
    for (int64_t dim : {64, 24}) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " d=" << dim);
      const Tensor q = to_gpu(random_normal({97, 4, dim}, 1), dt), k = to_gpu(random_normal({97, 2, dim}, 2), dt);
      const Tensor v = to_gpu(random_normal({97, 2, dim}, 3), dt), dout = to_gpu(random_normal({97, 4, dim}, 4), dt);
      const Tensor cu_g = gpu_i32(cu);
      auto run = [&] {
        Tensor out = Tensor::empty(q.shape(), dt, gpu()), lse = Tensor::empty({4, 97}, DType::f32, gpu());
        Tensor dq = Tensor::empty(q.shape(), dt, gpu()), dk = Tensor::empty(k.shape(), dt, gpu());
        Tensor dv = Tensor::empty(k.shape(), dt, gpu());
        ops::attention_forward(out, lse, q, k, v, cu_g, cu_g, 57, 57, 0.125f, true);
        ops::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, cu_g, cu_g, 57, 57, 0.125f, true);
        return std::vector<Tensor>{out.to(Device::cpu()), lse.to(Device::cpu()), dq.to(Device::cpu()),
                                   dk.to(Device::cpu()), dv.to(Device::cpu())};
      };
      const std::vector<Tensor> first = run(), second = run();
      for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(bitwise_equal(first[i], second[i])) << "output " << i;
    }
}

// Columns [h0, h1) of a host [T, Hall, D] tensor, as a contiguous [T, h1 - h0, D] tensor (any dtype, bytes copied).
Tensor head_columns(const Tensor& packed, int64_t h0, int64_t h1) {
  const int64_t t = packed.dim(0), hall = packed.dim(1), d = packed.dim(2);
  const size_t es = dtype_size(packed.dtype()), row = static_cast<size_t>((h1 - h0) * d) * es;
  Tensor out = Tensor::empty({t, h1 - h0, d}, packed.dtype());
  for (int64_t i = 0; i < t; ++i)
    std::memcpy(static_cast<char*>(out.raw_data()) + i * row,
                static_cast<const char*>(packed.raw_data()) + (i * hall + h0) * d * es, row);
  return out;
}

TEST(CudaAttention, RowStridedQkvAndGradientsMatchContiguous) {
  VLM_SKIP_WITHOUT_CUDA();
  // q, k, v as column slices of one packed [T, H + 2 Hkv, D] projection, and dq, dk, dv written into one packed
  // gradient (what the model does without RoPE): the same results as contiguous tensors, on the flash paths (bf16
  // d=64: Hopper or portable, deterministic or not) and the simple kernels (f32; bf16 d=20).
  const std::vector<int32_t> cu = {0, 40, 97, 230};
  const int64_t tq = 230, hq = 4, hkv = 2, hall = hq + 2 * hkv;
  const Tensor cu_g = gpu_i32(cu);
  for (DType dt : compute_dtypes())
    for (int64_t dim : {64, 20})
      for (bool deterministic : {true, false}) {
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " d=" << dim << (deterministic ? " det" : ""));
        const AttentionDeterminismScope scope(deterministic);
        const Tensor packed = to_gpu(random_normal({tq, hall, dim}, 5 + dim), dt);
        const Tensor host = packed.to(Device::cpu());
        const Tensor q = packed.slice(1, 0, hq), k = packed.slice(1, hq, hq + hkv), v = packed.slice(1, hq + hkv, hall);
        ASSERT_FALSE(q.is_contiguous());
        const Tensor qc = head_columns(host, 0, hq).to(gpu()), kc = head_columns(host, hq, hq + hkv).to(gpu());
        const Tensor vc = head_columns(host, hq + hkv, hall).to(gpu());
        const Tensor dout = to_gpu(random_normal({tq, hq, dim}, 6), dt);
        const float scale = 1.f / std::sqrt(static_cast<float>(dim));
        auto forward = [&](const Tensor& qq, const Tensor& kk, const Tensor& vv) {
          Tensor out = Tensor::empty({tq, hq, dim}, dt, gpu()), lse = Tensor::empty({hq, tq}, DType::f32, gpu());
          ops::attention_forward(out, lse, qq, kk, vv, cu_g, cu_g, 133, 133, scale, true);
          return std::pair{out, lse};
        };
        const auto [out_s, lse_s] = forward(q, k, v);
        const auto [out_c, lse_c] = forward(qc, kc, vc);
        EXPECT_TRUE(bitwise_equal(out_s.to(Device::cpu()), out_c.to(Device::cpu()))) << "out";
        EXPECT_TRUE(bitwise_equal(lse_s.to(Device::cpu()), lse_c.to(Device::cpu()))) << "lse";

        Tensor dqkv = Tensor::full({tq, hall, dim}, std::nanf("")).to(dt).to(gpu());  // poisoned: every element written
        Tensor dq = dqkv.slice(1, 0, hq), dk = dqkv.slice(1, hq, hq + hkv), dv = dqkv.slice(1, hq + hkv, hall);
        ops::attention_backward(dq, dk, dv, dout, q, k, v, out_s, lse_s, cu_g, cu_g, 133, 133, scale, true);
        Tensor dqc = Tensor::empty(qc.shape(), dt, gpu()), dkc = Tensor::empty(kc.shape(), dt, gpu());
        Tensor dvc = Tensor::empty(kc.shape(), dt, gpu());
        ops::attention_backward(dqc, dkc, dvc, dout, qc, kc, vc, out_c, lse_c, cu_g, cu_g, 133, 133, scale, true);
        const Tensor got = dqkv.to(Device::cpu());
        const Tensor parts[3] = {head_columns(got, 0, hq), head_columns(got, hq, hq + hkv),
                                 head_columns(got, hq + hkv, hall)};
        const Tensor want[3] = {dqc.to(Device::cpu()), dkc.to(Device::cpu()), dvc.to(Device::cpu())};
        for (int i = 0; i < 3; ++i) {
          if (deterministic || i > 0) {  // dk, dv are always summed in a fixed order; dq only in deterministic mode
            EXPECT_TRUE(bitwise_equal(parts[i], want[i])) << "gradient " << i;
          } else {
            const Tensor a = parts[i].to(DType::f32), b = want[i].to(DType::f32);
            const double tol = 8 * kBf16HalfUlp * max_abs(b) + 1e-6;
            for (int64_t j = 0; j < a.numel(); ++j)
              ASSERT_LE(std::fabs(a.data<float>()[j] - b.data<float>()[j]), tol) << "dq[" << j << "]";
          }
        }
      }
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

TEST(CudaAttention, BadCuSeqlensAreRecorded) {
  VLM_SKIP_WITHOUT_CUDA();
  ASSERT_TRUE(ops::check_index_errors(gpu()).ok());
  const Tensor q = to_gpu(random_normal({6, 1, 8}, 1), DType::f32);
  Tensor out = Tensor::empty(q.shape(), DType::f32, gpu()), lse = Tensor::empty({1, 6}, DType::f32, gpu());
  const Tensor bad = gpu_i32({0, 4, 3});  // decreasing, and does not end at 6
  ops::attention_forward(out, lse, q, q, q, bad, bad, 4, 4, 1.f, false);
  const Status s = ops::check_index_errors(gpu());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cu_seqlens"), std::string::npos) << s.message();
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());  // taken: cleared
}

// The check alone (what a model runs once for all of its layers before passing cu_seqlens_checked): recorded on the
// device like the attention ops' own, nothing for good values.
TEST(CudaAttention, CheckCuSeqlensAloneRecordsBadValues) {
  VLM_SKIP_WITHOUT_CUDA();
  ASSERT_TRUE(ops::check_index_errors(gpu()).ok());
  ops::check_cu_seqlens(gpu_i32({0, 4, 6}), 6, 4);
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
  ops::check_cu_seqlens(gpu_i32({0, 4, 6}), 6, 3);  // a sequence longer than max_seqlen
  Status s = ops::check_index_errors(gpu());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cu_seqlens"), std::string::npos) << s.message();
  ops::check_cu_seqlens(gpu_i32({0, 4, 5}), 6, 4);  // ends short of the rows
  EXPECT_FALSE(ops::check_index_errors(gpu()).ok());
}

}  // namespace
}  // namespace vlm::testing
