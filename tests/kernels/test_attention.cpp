// Varlen GQA attention against a float64 reference (forward) and finite differences (backward): causal and not,
// GQA ratios 1/2/4 and MQA, empty sequences, Lq != Lk with bottom-right causal masks, rows that see no key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

struct AttnCase {
  const char* name;
  std::vector<int32_t> lens_q, lens_k;
  int64_t heads_q, heads_kv, dim;
};

std::vector<int32_t> cumulative(const std::vector<int32_t>& lens) {
  std::vector<int32_t> cu(lens.size() + 1, 0);
  std::partial_sum(lens.begin(), lens.end(), cu.begin() + 1);
  return cu;
}

struct AttnRef {
  Doubles out, lse;  // [Tq, Hq, D], [Hq, Tq]
};

// Plain softmax attention per (sequence, head, query row) over the keys the mask allows.
AttnRef attention_ref(const Doubles& q, const Doubles& k, const Doubles& v, const AttnCase& c, double scale,
                      bool causal) {
  const auto cu_q = cumulative(c.lens_q), cu_k = cumulative(c.lens_k);
  const int64_t tq = cu_q.back(), hq = c.heads_q, hkv = c.heads_kv, d = c.dim;
  AttnRef r{Doubles(static_cast<size_t>(tq * hq * d), 0.0), Doubles(static_cast<size_t>(hq * tq), 0.0)};
  for (size_t b = 0; b < c.lens_q.size(); ++b) {
    const int64_t lq = c.lens_q[b], lk = c.lens_k[b];
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kvh = h / (hq / hkv);
      for (int64_t i = 0; i < lq; ++i) {
        const int64_t qrow = cu_q[b] + i;
        std::vector<double> s;
        std::vector<int64_t> keys;
        for (int64_t j = 0; j < lk; ++j) {
          if (causal && j - (lk - lq) > i) continue;  // bottom-right: key j sits at query position j - (lk - lq)
          double dotp = 0;
          for (int64_t e = 0; e < d; ++e)
            dotp += q[static_cast<size_t>((qrow * hq + h) * d + e)] *
                    k[static_cast<size_t>(((cu_k[b] + j) * hkv + kvh) * d + e)];
          s.push_back(scale * dotp);
          keys.push_back(j);
        }
        double& lse = r.lse[static_cast<size_t>(h * tq + qrow)];
        if (s.empty()) {
          lse = -std::numeric_limits<double>::infinity();
          continue;
        }
        const double m = *std::max_element(s.begin(), s.end());
        double z = 0;
        for (double x : s) z += std::exp(x - m);
        lse = m + std::log(z);
        for (size_t n = 0; n < keys.size(); ++n) {
          const double p = std::exp(s[n] - lse);
          for (int64_t e = 0; e < d; ++e)
            r.out[static_cast<size_t>((qrow * hq + h) * d + e)] +=
                p * v[static_cast<size_t>(((cu_k[b] + keys[n]) * hkv + kvh) * d + e)];
        }
      }
    }
  }
  return r;
}

// lse may hold -inf (rows that see no key), which all_close rejects: compare those positions exactly.
::testing::AssertionResult lse_close(const Tensor& lse, const Doubles& expect) {
  for (int64_t i = 0; i < lse.numel(); ++i) {
    const double a = lse.data<float>()[i], e = expect[static_cast<size_t>(i)];
    const bool ok = std::isinf(e) ? (std::isinf(a) && a < 0) : std::fabs(a - e) <= 1e-5 + 1e-5 * std::fabs(e);
    if (!ok) return ::testing::AssertionFailure() << "lse[" << i << "] = " << a << ", expected " << e;
  }
  return ::testing::AssertionSuccess();
}

const AttnCase kCases[] = {
    {"mha", {17}, {17}, 2, 2, 8},
    {"gqa2", {5, 9}, {5, 9}, 4, 2, 6},
    {"gqa4", {7}, {7}, 8, 2, 4},
    {"mqa", {6, 3}, {6, 3}, 4, 1, 5},
    {"varlen_with_empty", {1, 17, 0, 5}, {1, 17, 0, 5}, 2, 1, 4},
    {"lq_ne_lk", {3, 5, 4}, {7, 2, 4}, 2, 2, 3},  // causal: rows 0..2 of sequence 1 see no key
    {"decode", {1, 1}, {9, 4}, 3, 1, 8},
    {"keys_empty", {3, 2}, {0, 4}, 2, 2, 2},  // sequence 0 has queries but no keys at all
    {"head_dim_1", {4}, {6}, 1, 1, 1},
};

struct AttnInputs {
  Tensor q, k, v, cu_q, cu_k;
  int max_q, max_k;
  float scale;
};

AttnInputs make_inputs(const AttnCase& c, uint64_t seed) {
  const auto cu_q = cumulative(c.lens_q), cu_k = cumulative(c.lens_k);
  AttnInputs in;
  in.q = random_normal({cu_q.back(), c.heads_q, c.dim}, seed);
  in.k = random_normal({cu_k.back(), c.heads_kv, c.dim}, seed + 1);
  in.v = random_normal({cu_k.back(), c.heads_kv, c.dim}, seed + 2);
  in.cu_q = i32_tensor(cu_q);
  in.cu_k = i32_tensor(cu_k);
  in.max_q = *std::max_element(c.lens_q.begin(), c.lens_q.end());
  in.max_k = *std::max_element(c.lens_k.begin(), c.lens_k.end());
  in.scale = 1.f / std::sqrt(static_cast<float>(c.dim));
  return in;
}

void run_forward(const AttnCase& c, const AttnInputs& in, bool causal, Tensor& out, Tensor& lse) {
  out = nan_tensor(in.q.shape());
  lse = nan_tensor({c.heads_q, in.q.dim(0)});
  ops::attention_forward(out, lse, in.q, in.k, in.v, in.cu_q, in.cu_k, in.max_q, in.max_k, in.scale, causal);
}

TEST(Attention, ForwardMatchesFloat64Reference) {
  std::vector<AttnCase> cases(std::begin(kCases), std::end(kCases));
  cases.push_back({"large_head_dim", {33, 20}, {33, 40}, 4, 2, 64});
  uint64_t seed = 1;
  for (const AttnCase& c : cases)
    for (bool causal : {false, true}) {
      SCOPED_TRACE(::testing::Message() << c.name << (causal ? " causal" : " full"));
      const AttnInputs in = make_inputs(c, seed);
      seed += 3;
      Tensor out, lse;
      run_forward(c, in, causal, out, lse);
      const AttnRef r = attention_ref(to_doubles(in.q), to_doubles(in.k), to_doubles(in.v), c, in.scale, causal);
      EXPECT_TRUE(all_close(out, from_doubles(r.out, out.shape()), 1e-5, 1e-5));
      EXPECT_TRUE(lse_close(lse, r.lse));
    }
}

TEST(Attention, RowsThatSeeNoKeyGetZeroOutputAndMinusInfLse) {
  const AttnCase c{"no_key", {5}, {2}, 2, 1, 4};  // causal: query i sees keys j <= i - 3
  const AttnInputs in = make_inputs(c, 50);
  Tensor out, lse;
  run_forward(c, in, /*causal=*/true, out, lse);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 5; ++i) {
      const float l = lse.data<float>()[h * 5 + i];
      if (i < 3) {
        EXPECT_TRUE(std::isinf(l) && l < 0) << "h " << h << " i " << i << ": " << l;
        for (int64_t e = 0; e < 4; ++e) EXPECT_EQ(out.data<float>()[(i * 2 + h) * 4 + e], 0.f);
      } else {
        EXPECT_TRUE(std::isfinite(l));
      }
    }
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  uint64_t seed = 1000;
  for (const AttnCase& c : kCases)
    for (bool causal : {false, true}) {
      SCOPED_TRACE(::testing::Message() << c.name << (causal ? " causal" : " full"));
      const AttnInputs in = make_inputs(c, seed);
      seed += 3;
      Tensor out, lse;
      run_forward(c, in, causal, out, lse);
      Tensor dout = random_normal(out.shape(), seed++);
      Tensor dq = nan_tensor(in.q.shape()), dk = nan_tensor(in.k.shape()), dv = nan_tensor(in.k.shape());
      ops::attention_backward(dq, dk, dv, dout, in.q, in.k, in.v, out, lse, in.cu_q, in.cu_k, in.max_q, in.max_k,
                              in.scale, causal);
      const RefFn ref = [&](const std::vector<Doubles>& x) {
        return attention_ref(x[0], x[1], x[2], c, in.scale, causal).out;
      };
      const std::vector<Doubles> inputs = {to_doubles(in.q), to_doubles(in.k), to_doubles(in.v)};
      const Doubles dy = to_doubles(dout);
      EXPECT_TRUE(all_close(dq, from_doubles(numeric_grad(ref, inputs, 0, dy), dq.shape()), 1e-3, 1e-4));
      EXPECT_TRUE(all_close(dk, from_doubles(numeric_grad(ref, inputs, 1, dy), dk.shape()), 1e-3, 1e-4));
      EXPECT_TRUE(all_close(dv, from_doubles(numeric_grad(ref, inputs, 2, dy), dv.shape()), 1e-3, 1e-4));

      // Undefined gradients are skipped; the others are unchanged.
      Tensor none, dv_only = nan_tensor(in.k.shape());
      ops::attention_backward(none, none, dv_only, dout, in.q, in.k, in.v, out, lse, in.cu_q, in.cu_k, in.max_q,
                              in.max_k, in.scale, causal);
      EXPECT_TRUE(bitwise_equal(dv_only, dv));
    }
}

// check_cu_seqlens alone: what the attention ops check, with the op's own name in the message.
TEST(Attention, CheckCuSeqlensAlone) {
  use_threadsafe_death_tests();
  ops::check_cu_seqlens(i32_tensor({0, 5, 8}), 8, 5);
  ops::check_cu_seqlens(i32_tensor({0}), 0, 0);  // no sequence
  EXPECT_DEATH(ops::check_cu_seqlens(i32_tensor({0, 5, 8}), 8, 4),
               "ops::check_cu_seqlens: sequence 0 has length 5 > max_seqlen 4");
  EXPECT_DEATH(ops::check_cu_seqlens(i32_tensor({0, 6, 5}), 5, 6), "ops::check_cu_seqlens: cu_seqlens decreases at 2");
  EXPECT_DEATH(ops::check_cu_seqlens(i32_tensor({1, 5}), 5, 6), "ops::check_cu_seqlens: cu_seqlens\\[0\\] = 1");
  EXPECT_DEATH(ops::check_cu_seqlens(i32_tensor({0, 5}), 7, 6),
               "ops::check_cu_seqlens: cu_seqlens\\[1\\] = 5 but the tensor has 7 rows");
  EXPECT_DEATH(ops::check_cu_seqlens(Tensor::zeros({2}, DType::f32), 0, 0), "check_cu_seqlens");
}

TEST(Attention, SequenceLongerThanMaxSeqlenAborts) {
  use_threadsafe_death_tests();
  const AttnCase c{"too_long", {5, 3}, {5, 3}, 2, 2, 4};
  const AttnInputs in = make_inputs(c, 70);
  Tensor out = nan_tensor(in.q.shape()), lse = nan_tensor({2, 8});
  EXPECT_DEATH(ops::attention_forward(out, lse, in.q, in.k, in.v, in.cu_q, in.cu_k, 4, 5, in.scale, false),
               "ops::attention_forward: sequence 0 has length 5 > max_seqlen 4");
  EXPECT_DEATH(ops::attention_forward(out, lse, in.q, in.k, in.v, in.cu_q, in.cu_k, 5, 4, in.scale, false),
               "ops::attention_forward: sequence 0 has length 5 > max_seqlen 4 \\(cu_seqlens_k\\)");
  Tensor decreasing = i32_tensor({0, 6, 5});
  EXPECT_DEATH(ops::attention_forward(out, lse, in.q, in.k, in.v, decreasing, in.cu_k, 6, 5, in.scale, false),
               "ops::attention_forward: cu_seqlens_q decreases at 2");
  Tensor short_cu = i32_tensor({0, 5, 7});
  EXPECT_DEATH(ops::attention_forward(out, lse, in.q, in.k, in.v, short_cu, in.cu_k, 5, 5, in.scale, false),
               "ops::attention_forward: cu_seqlens_q\\[2\\] = 7 but the tensor has 8 rows");
}

}  // namespace
}  // namespace vlm::testing
