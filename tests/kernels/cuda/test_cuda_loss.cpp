// Cross-entropy on CUDA against the CPU reference: forward, backward, the fused forward+backward, in place over the
// logits (dlogits aliasing logits), ignored rows, vocabularies from 1 to 50k (several chunks per thread), large
// logits (the max subtraction), f32 and bf16 logits; the chunked LM-head loss; and bad targets, which the GPU records
// instead of aborting.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "kernels/gumbel.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

constexpr int kIgnore = -100;

struct LossCase {
  int64_t rows, vocab;
  float logit_std;
};
// Vocabularies that are multiples of 8 (16-byte vectors on every row: 16, 1000, 49152, the model's) and that are not
// (each row starts at a different offset within 16 bytes: scalar elements around the vectors: 17, 129, 1003, 50257),
// at each block size (32, 128, 256, 1024 threads); every 4th row is ignored.
const LossCase kCases[] = {{1, 1, 1.f},      {3, 17, 1.f},       {17, 129, 3.f}, {5, 1000, 10.f},
                           {4, 50257, 2.f},  {2, 7, 80.f},       {4, 16, 1.f},   {6, 1003, 4.f},
                           {9, 49152, 3.f},  {5, 12288, 2.f}};

std::vector<int32_t> make_targets(int64_t rows, int64_t vocab, uint64_t seed) {
  Philox rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i)
    t[static_cast<size_t>(i)] =
        i % 4 == 3 ? kIgnore : static_cast<int32_t>(std::min<int64_t>(vocab - 1, rng.uniform() * vocab));
  return t;
}

TEST(CudaLoss, CrossEntropyMatchesCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 1;
  for (DType dt : compute_dtypes())
    for (const LossCase& c : kCases) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " rows=" << c.rows << " vocab=" << c.vocab
                                        << " std=" << c.logit_std);
      const Tensor logits = random_normal({c.rows, c.vocab}, seed++, c.logit_std);
      const std::vector<int32_t> targets = make_targets(c.rows, c.vocab, seed++);
      const Tensor logits_r = rounded(logits, dt), targets_cpu = i32_tensor(targets), targets_gpu = gpu_i32(targets);
      const float dloss = 1.f / static_cast<float>(c.rows);

      Tensor ref_losses = Tensor::empty({c.rows}, DType::f32), ref_dlogits = Tensor::empty(logits.shape(), DType::f32);
      ops::cross_entropy_forward(ref_losses, logits_r, targets_cpu, kIgnore);
      ops::cross_entropy_backward(ref_dlogits, logits_r, targets_cpu, dloss, kIgnore);
      // The CPU sums the exponentials in double; the GPU in fp32 over at most 50k terms per row.
      const Tolerance loss_tol{1e-5, 1e-5 * c.logit_std};
      // dlogits = (p - onehot) * dloss with p in (0, 1]: an lse error e (up to an ulp of |lse|, ~1.5e-5 for the
      // largest logits here) moves p relatively by e; at the target, p - 1 cancels, hence the dloss-scaled floor.
      const Tolerance grad_tol = output_tolerance(dt, {5e-5, 5e-5 * dloss});

      Guarded losses(Shape{c.rows}, DType::f32);
      ops::cross_entropy_forward(losses.view(), to_gpu(logits, dt), targets_gpu, kIgnore);
      EXPECT_TRUE(matches(losses, ref_losses, loss_tol));

      Guarded dlogits(logits.shape(), dt);
      ops::cross_entropy_backward(dlogits.view(), to_gpu(logits, dt), targets_gpu, dloss, kIgnore);
      EXPECT_TRUE(matches(dlogits, ref_dlogits, grad_tol));

      // Fused, in place: the logits buffer ends up holding its gradient.
      Guarded fused_losses(Shape{c.rows}, DType::f32), in_place(logits, dt);
      ops::cross_entropy_forward_backward(fused_losses.view(), in_place.view(), in_place.view(), targets_gpu, dloss,
                                          kIgnore);
      EXPECT_TRUE(matches(fused_losses, ref_losses, loss_tol));
      EXPECT_TRUE(matches(in_place, ref_dlogits, grad_tol));
    }
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, static_cast<double>(std::fabs(t.data<float>()[i])));
  return m;
}

// The chunked LM-head loss on CUDA against the CPU op. For bf16 the reference follows the GPU's rounding points: the
// logits of each chunk are stored in bf16 (so they are rounded before the softmax) and so is their gradient. What is
// left is the fp32 summation order of the GEMMs, which can move a logit across a bf16 rounding boundary (one bf16
// ulp, at most 2^-7 relative): at the target that moves the loss by up to 2^-7 |logit|.
TEST(CudaLoss, ChunkedLmHeadMatchesCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  struct HeadCase {
    int64_t rows, cols, vocab, chunk;
  };
  const HeadCase cases[] = {{1, 8, 3, 1}, {37, 64, 1000, 16}, {64, 96, 5003, 64}, {9, 40, 257, 100}};
  uint64_t seed = 500;
  for (DType dt : compute_dtypes())
    for (const HeadCase& c : cases) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " T=" << c.rows << " C=" << c.cols << " V=" << c.vocab
                                        << " chunk=" << c.chunk);
      const bool bf16 = dt == DType::bf16;
      const Tensor hidden = rounded(random_normal({c.rows, c.cols}, seed++), dt);
      const float w_std = 2.f / std::sqrt(static_cast<float>(c.cols));  // logits ~ N(0, 4)
      const Tensor w = rounded(random_normal({c.vocab, c.cols}, seed++, w_std), dt);
      const std::vector<int32_t> targets = make_targets(c.rows, c.vocab, seed++);
      const float dloss = 1.f / static_cast<float>(c.rows);
      Tensor none, ref_losses = Tensor::empty({c.rows}, DType::f32);
      Tensor ref_dhidden = Tensor::empty(hidden.shape(), DType::f32), ref_dw = Tensor::zeros(w.shape(), DType::f32);
      Tensor logits = Tensor::empty({c.rows, c.vocab}, DType::f32);
      ops::linear_forward(logits, hidden, w, none);
      const double logit_max = max_abs(logits);
      logits = rounded(logits, dt);
      ops::cross_entropy_forward_backward(ref_losses, logits, logits, i32_tensor(targets), dloss, kIgnore);
      logits = rounded(logits, dt);
      ops::linear_backward(ref_dhidden, ref_dw, none, logits, hidden, w);

      Guarded losses(Shape{c.rows}, DType::f32), dhidden(hidden.shape(), dt);
      Guarded dw(Tensor::zeros(w.shape(), DType::f32), DType::f32);
      const Tensor hg = to_gpu(hidden, dt), wg = to_gpu(w, dt), tg = gpu_i32(targets);
      ops::lm_head_cross_entropy(losses.view(), dhidden.view(), dw.view(), hg, wg, tg, dloss, kIgnore, c.chunk);
      const double loss_atol = bf16 ? std::ldexp(1.0, -7) * logit_max + 1e-5 : 1e-5;
      EXPECT_TRUE(matches(losses, ref_losses, {1e-5, loss_atol}));
      const double dh_scale = max_abs(ref_dhidden), dw_scale = max_abs(ref_dw);
      const double rel = bf16 ? 4 * kBf16HalfUlp : 1e-5;
      EXPECT_TRUE(close_within(dhidden.view(), ref_dhidden, [&](int64_t, double e) {
        return rel * std::fabs(e) + rel * dh_scale + 1e-7;
      })) << "dhidden";
      EXPECT_TRUE(close_within(dw.view(), ref_dw, [&](int64_t, double e) {
        return rel * std::fabs(e) + rel * dw_scale + 1e-7;
      })) << "dw";
      EXPECT_TRUE(dhidden.guards_intact());
      EXPECT_TRUE(dw.guards_intact());
    }
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

TEST(CudaLoss, BadTargetGivesNanAndIsRecorded) {
  VLM_SKIP_WITHOUT_CUDA();
  ASSERT_TRUE(ops::check_index_errors(gpu()).ok());
  const Tensor logits = to_gpu(random_normal({3, 10}, 1), DType::f32);
  Tensor losses = Tensor::empty({3}, DType::f32, gpu());
  ops::cross_entropy_forward(losses, logits, gpu_i32({2, 10, kIgnore}), kIgnore);
  const Tensor host = losses.to(Device::cpu());
  EXPECT_TRUE(std::isfinite(host.data<float>()[0]));
  EXPECT_TRUE(std::isnan(host.data<float>()[1]));
  EXPECT_EQ(host.data<float>()[2], 0.f);
  const Status s = ops::check_index_errors(gpu());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cross_entropy (targets): entry 1 = 10 is outside [0, 10)"), std::string::npos)
      << s.message();
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

// Logits that start 1 or 3 elements into their buffer, with dlogits in place (same misalignment: vectors after a
// scalar head) or in a separate aligned buffer (different alignment: every row scalar); and rows with -inf logits
// (masked entries, a vector of nothing but -inf first): same results as the CPU.
TEST(CudaLoss, OffsetViewsAndInfiniteLogitsMatchCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 800;
  for (DType dt : compute_dtypes())
    for (int64_t vocab : {48, 1000, 49152})
      for (int64_t offset : {0, 1, 3}) {
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " vocab=" << vocab << " offset=" << offset);
        const int64_t rows = 6;
        Tensor logits = random_normal({rows, vocab}, seed++, 2.f);
        for (int64_t r = 0; r < rows; ++r)  // row r: its first 8r + 3 entries masked (the target stays finite)
          for (int64_t v = 0; v < std::min(vocab - 1, 8 * r + 3); ++v)
            logits.data<float>()[r * vocab + v] = -std::numeric_limits<float>::infinity();
        std::vector<int32_t> targets(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r)
          targets[static_cast<size_t>(r)] = r == 4 ? kIgnore : static_cast<int32_t>(vocab - 1 - r % 2);
        const Tensor logits_r = rounded(logits, dt), targets_cpu = i32_tensor(targets);
        const Tensor targets_gpu = gpu_i32(targets);
        const float dloss = 0.25f;
        Tensor ref_losses = Tensor::empty({rows}, DType::f32), ref_dlogits = Tensor::empty(logits.shape(), DType::f32);
        ops::cross_entropy_forward(ref_losses, logits_r, targets_cpu, kIgnore);
        ops::cross_entropy_backward(ref_dlogits, logits_r, targets_cpu, dloss, kIgnore);
        const Tolerance loss_tol{1e-5, 2e-5}, grad_tol = output_tolerance(dt, {5e-5, 5e-5 * dloss});

        Guarded losses(Shape{rows}, DType::f32), dlogits(logits.shape(), dt);
        const Tensor src = to_gpu_at_offset(logits, dt, offset);
        ops::cross_entropy_forward_backward(losses.view(), dlogits.view(), src, targets_gpu, dloss, kIgnore);
        EXPECT_TRUE(matches(losses, ref_losses, loss_tol)) << "separate dlogits";
        EXPECT_TRUE(matches(dlogits, ref_dlogits, grad_tol)) << "separate dlogits";

        Tensor in_place = to_gpu_at_offset(logits, dt, offset);
        Guarded losses2(Shape{rows}, DType::f32);
        ops::cross_entropy_forward_backward(losses2.view(), in_place, in_place, targets_gpu, dloss, kIgnore);
        EXPECT_TRUE(matches(losses2, ref_losses, loss_tol)) << "in place";
        EXPECT_TRUE(all_close(to_cpu_f32(in_place), ref_dlogits, grad_tol.rtol, grad_tol.atol)) << "in place";
      }
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

// argmax_rows on the GPU picks what the CPU picks from the same (rounded) logits, at every block size; rows made of
// few distinct values (many ties: the lowest index must win) and rows where the maximum is the banned id.
TEST(CudaLoss, ArgmaxRowsMatchesCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 500;
  for (DType dt : compute_dtypes())
    for (const LossCase& c : kCases)
      for (bool ties : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " rows=" << c.rows << " vocab=" << c.vocab
                                          << (ties ? " ties" : ""));
        Tensor logits = random_normal({c.rows, c.vocab}, seed++, c.logit_std);
        if (ties)
          for (int64_t i = 0; i < logits.numel(); ++i) logits.data<float>()[i] = std::round(logits.data<float>()[i]);
        const Tensor logits_r = rounded(logits, dt);
        const int32_t banned = static_cast<int32_t>(c.vocab / 2);
        for (int32_t b : {int32_t{-1}, banned}) {
          Tensor ref = i32_tensor(std::vector<int32_t>(static_cast<size_t>(c.rows), -7));
          ops::argmax_rows(ref, logits_r, b);
          Tensor ids = gpu_i32(std::vector<int32_t>(static_cast<size_t>(c.rows), -7));
          ops::argmax_rows(ids, to_gpu(logits, dt), b);
          const Tensor got = ids.to(Device::cpu());
          EXPECT_EQ(std::vector<int32_t>(got.data<int32_t>(), got.data<int32_t>() + c.rows),
                    std::vector<int32_t>(ref.data<int32_t>(), ref.data<int32_t>() + c.rows))
              << "banned " << b;
        }
      }
}

// The GPU's sample equals the CPU's for the same keys, except where the two best scores are so close that the CPU's
// and the GPU's logf (or a fused multiply-add) may order them differently.
TEST(CudaLoss, GumbelArgmaxRowsMatchesCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 900;
  for (DType dt : compute_dtypes())
    for (const LossCase& c : kCases) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " rows=" << c.rows << " vocab=" << c.vocab);
      const Tensor logits_r = rounded(random_normal({c.rows, c.vocab}, seed++, c.logit_std), dt);
      std::vector<float> inv_t;
      std::vector<int64_t> keys;
      for (int64_t r = 0; r < c.rows; ++r) {
        inv_t.push_back(r % 3 == 0 ? 0.f : 1.f / (0.5f + 0.25f * static_cast<float>(r % 4)));  // greedy rows too
        keys.push_back(static_cast<int64_t>(seed * 1000003 + static_cast<uint64_t>(r)));
      }
      const Tensor t = Tensor::from_vector(inv_t, {c.rows}), k = Tensor::from_vector(keys, {c.rows});
      const int32_t banned = static_cast<int32_t>(c.vocab / 2);
      Tensor ref = i32_tensor(std::vector<int32_t>(static_cast<size_t>(c.rows), -7));
      ops::gumbel_argmax_rows(ref, logits_r, t, k, banned);
      Tensor ids = gpu_i32(std::vector<int32_t>(static_cast<size_t>(c.rows), -7));
      ops::gumbel_argmax_rows(ids, to_gpu(logits_r, dt), t.to(gpu()), k.to(gpu()), banned);
      const Tensor got = ids.to(Device::cpu());
      for (int64_t r = 0; r < c.rows; ++r) {
        const int32_t a = got.data<int32_t>()[r], b = ref.data<int32_t>()[r];
        if (a == b) continue;
        ASSERT_TRUE(a >= 0 && a < c.vocab && a != banned) << "row " << r << " picked " << a;
        const float s = inv_t[static_cast<size_t>(r)];
        const uint64_t key = static_cast<uint64_t>(keys[static_cast<size_t>(r)]);
        const auto score = [&](int32_t v) {
          const float x = logits_r.data<float>()[r * c.vocab + v];
          return s > 0.f ? x * s + ops::gumbel::noise(key, v) : x;
        };
        EXPECT_NEAR(score(a), score(b), 1e-4 * (1 + std::fabs(score(b)))) << "row " << r << ": " << a << " vs " << b;
      }
    }
}

}  // namespace
}  // namespace vlm::testing
