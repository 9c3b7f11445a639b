// Tests of the CPU attention reference (label cpu): gradients against central finite differences in float64,
// and the defining properties of the masks, GQA, varlen packing and empty rows; the naive-bf16 mode must differ
// from the exact one by bf16-sized errors only.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/philox.h"
#include "kernels/cuda/flash/flash_reference.h"

namespace vlm::flash {
namespace {

std::vector<double> randn(size_t n, uint64_t seed) {
  Philox rng(seed);
  std::vector<double> v(n);
  for (auto& x : v) x = rng.normal();
  return v;
}

RefProblem make_problem(std::vector<int32_t> lq, std::vector<int32_t> lk, int hq, int hkv, int d, bool causal) {
  RefProblem p;
  p.cu_seqlens_q = {0};
  p.cu_seqlens_k = {0};
  for (size_t b = 0; b < lq.size(); ++b) {
    p.cu_seqlens_q.push_back(p.cu_seqlens_q.back() + lq[b]);
    p.cu_seqlens_k.push_back(p.cu_seqlens_k.back() + lk[b]);
  }
  p.n_heads_q = hq;
  p.n_heads_kv = hkv;
  p.head_dim = d;
  p.scale = 1.0 / std::sqrt(static_cast<double>(d));
  p.causal = causal;
  return p;
}

struct Data {
  std::vector<double> q, k, v, out, lse;
};

Data run_forward(const RefProblem& p, uint64_t seed, RefMode mode = RefMode::exact) {
  Data x;
  const size_t nq = p.total_q() * p.n_heads_q * p.head_dim, nk = p.total_k() * p.n_heads_kv * p.head_dim;
  x.q = randn(nq, seed);
  x.k = randn(nk, seed + 1);
  x.v = randn(nk, seed + 2);
  x.out.assign(nq, std::nan(""));
  x.lse.assign(p.total_q() * p.n_heads_q, std::nan(""));
  attention_ref_forward(p, x.q.data(), x.k.data(), x.v.data(), x.out.data(), x.lse.data(), mode);
  return x;
}

// Scalar loss L = sum(out * w); its gradient through the reference backward against central differences.
void check_gradients(const RefProblem& p, uint64_t seed) {
  Data x = run_forward(p, seed);
  const std::vector<double> w = randn(x.out.size(), seed + 7);
  std::vector<double> dq(x.q.size(), std::nan("")), dk(x.k.size(), std::nan("")), dv(x.v.size(), std::nan(""));
  attention_ref_backward(p, x.q.data(), x.k.data(), x.v.data(), x.out.data(), x.lse.data(), w.data(), dq.data(),
                         dk.data(), dv.data(), RefMode::exact);
  auto loss = [&](const Data& y) {
    std::vector<double> out(y.out.size()), lse(y.lse.size());
    attention_ref_forward(p, y.q.data(), y.k.data(), y.v.data(), out.data(), lse.data(), RefMode::exact);
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * w[i];
    return l;
  };
  const double eps = 1e-5;
  auto check = [&](std::vector<double> Data::*field, const std::vector<double>& grad, const char* name) {
    for (size_t i = 0; i < grad.size(); ++i) {
      Data y = x;
      (y.*field)[i] += eps;
      const double lp = loss(y);
      (y.*field)[i] -= 2 * eps;
      const double lm = loss(y);
      const double fd = (lp - lm) / (2 * eps);
      ASSERT_TRUE(std::fabs(fd - grad[i]) <= 1e-7 + 1e-6 * std::fabs(fd))
          << name << "[" << i << "]: backward " << grad[i] << ", finite difference " << fd;
    }
  };
  check(&Data::q, dq, "dq");
  check(&Data::k, dk, "dk");
  check(&Data::v, dv, "dv");
}

TEST(FlashReference, GradientsMatchFiniteDifferencesNonCausal) {
  check_gradients(make_problem({3, 0, 5}, {4, 2, 5}, 4, 2, 8, false), 11);
}

TEST(FlashReference, GradientsMatchFiniteDifferencesCausalBottomRight) {
  // Lq < Lk, Lq > Lk (with rows that see nothing) and Lq == Lk; MQA.
  check_gradients(make_problem({2, 5, 3}, {5, 2, 3}, 3, 1, 8, true), 12);
}

TEST(FlashReference, SingleKeyReturnsItsValue) {
  RefProblem p = make_problem({5}, {1}, 2, 2, 16, false);
  Data x = run_forward(p, 21);
  for (int i = 0; i < 5; ++i)
    for (int h = 0; h < 2; ++h) {
      double qk = 0;
      for (int c = 0; c < 16; ++c) {
        EXPECT_NEAR(x.out[(i * 2 + h) * 16 + c], x.v[h * 16 + c], 1e-12);
        qk += x.q[(i * 2 + h) * 16 + c] * x.k[h * 16 + c];
      }
      EXPECT_NEAR(x.lse[h * 5 + i], p.scale * qk, 1e-12);
    }
}

TEST(FlashReference, LseIsLogSumExpOfVisibleScores) {
  RefProblem p = make_problem({3}, {6}, 1, 1, 8, true);
  Data x = run_forward(p, 22);
  for (int i = 0; i < 3; ++i) {
    double sum = 0;
    for (int j = 0; j <= i + 3; ++j) {
      double qk = 0;
      for (int c = 0; c < 8; ++c) qk += x.q[i * 8 + c] * x.k[j * 8 + c];
      sum += std::exp(p.scale * qk);
    }
    EXPECT_NEAR(x.lse[i], std::log(sum), 1e-12);
  }
}

TEST(FlashReference, RowsThatSeeNoKeyGiveZeroAndMinusInf) {
  // Causal with Lq = 4 > Lk = 2: query i sees keys j <= i - 2, so rows 0 and 1 see nothing.
  RefProblem p = make_problem({4}, {2}, 1, 1, 8, true);
  Data x = run_forward(p, 23);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(x.lse[i], -std::numeric_limits<double>::infinity());
    for (int c = 0; c < 8; ++c) EXPECT_EQ(x.out[i * 8 + c], 0.0);
  }
  EXPECT_TRUE(std::isfinite(x.lse[2]) && std::isfinite(x.lse[3]));
  std::vector<double> dout = randn(x.out.size(), 5), dq(x.q.size()), dk(x.k.size()), dv(x.v.size());
  attention_ref_backward(p, x.q.data(), x.k.data(), x.v.data(), x.out.data(), x.lse.data(), dout.data(), dq.data(),
                         dk.data(), dv.data(), RefMode::exact);
  for (int c = 0; c < 16; ++c) EXPECT_EQ(dq[c], 0.0);
}

TEST(FlashReference, GqaEqualsMhaWithRepeatedKvHeads) {
  const int hq = 4, hkv = 2, d = 8, t = 7;
  RefProblem gqa = make_problem({t}, {t}, hq, hkv, d, true), mha = make_problem({t}, {t}, hq, hq, d, true);
  Data x = run_forward(gqa, 31);
  std::vector<double> k4(t * hq * d), v4(t * hq * d);
  for (int j = 0; j < t; ++j)
    for (int h = 0; h < hq; ++h)
      for (int c = 0; c < d; ++c) {
        k4[(j * hq + h) * d + c] = x.k[(j * hkv + h / 2) * d + c];
        v4[(j * hq + h) * d + c] = x.v[(j * hkv + h / 2) * d + c];
      }
  std::vector<double> out(x.out.size()), lse(x.lse.size());
  attention_ref_forward(mha, x.q.data(), k4.data(), v4.data(), out.data(), lse.data(), RefMode::exact);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], x.out[i], 1e-12);
  const std::vector<double> dout = randn(out.size(), 32);
  std::vector<double> dq(x.q.size()), dk(x.k.size()), dv(x.v.size()), dq4(x.q.size()), dk4(k4.size()), dv4(v4.size());
  attention_ref_backward(gqa, x.q.data(), x.k.data(), x.v.data(), x.out.data(), x.lse.data(), dout.data(), dq.data(),
                         dk.data(), dv.data(), RefMode::exact);
  attention_ref_backward(mha, x.q.data(), k4.data(), v4.data(), out.data(), lse.data(), dout.data(), dq4.data(),
                         dk4.data(), dv4.data(), RefMode::exact);
  for (size_t i = 0; i < dq.size(); ++i) EXPECT_NEAR(dq[i], dq4[i], 1e-12);
  for (int j = 0; j < t; ++j)
    for (int hk = 0; hk < hkv; ++hk)
      for (int c = 0; c < d; ++c) {
        const double sk = dk4[(j * hq + 2 * hk) * d + c] + dk4[(j * hq + 2 * hk + 1) * d + c];
        const double sv = dv4[(j * hq + 2 * hk) * d + c] + dv4[(j * hq + 2 * hk + 1) * d + c];
        EXPECT_NEAR(dk[(j * hkv + hk) * d + c], sk, 1e-12);
        EXPECT_NEAR(dv[(j * hkv + hk) * d + c], sv, 1e-12);
      }
}

TEST(FlashReference, VarlenEqualsSeparateSequences) {
  const std::vector<int32_t> lq = {3, 1, 6}, lk = {5, 4, 2};
  const int h = 2, d = 8;
  RefProblem packed = make_problem(lq, lk, h, h, d, true);
  Data x = run_forward(packed, 41);
  for (size_t b = 0; b < lq.size(); ++b) {
    RefProblem one = make_problem({lq[b]}, {lk[b]}, h, h, d, true);
    const int q0 = packed.cu_seqlens_q[b], k0 = packed.cu_seqlens_k[b];
    std::vector<double> out(lq[b] * h * d), lse(lq[b] * h);
    attention_ref_forward(one, x.q.data() + q0 * h * d, x.k.data() + k0 * h * d, x.v.data() + k0 * h * d, out.data(),
                          lse.data(), RefMode::exact);
    for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], x.out[q0 * h * d + i]);
    for (int hh = 0; hh < h; ++hh)
      for (int i = 0; i < lq[b]; ++i) EXPECT_EQ(lse[hh * lq[b] + i], x.lse[hh * packed.total_q() + q0 + i]);
  }
}

TEST(FlashReference, NaiveBf16DiffersFromExactByBf16SizedErrors) {
  RefProblem p = make_problem({64}, {64}, 2, 2, 64, false);
  Data x = run_forward(p, 51);
  for (auto* v : {&x.q, &x.k, &x.v})
    for (double& e : *v) e = round_bf16(e);  // bf16 inputs, as the kernels see them
  std::vector<double> exact(x.out.size()), naive(x.out.size()), lse(x.lse.size());
  attention_ref_forward(p, x.q.data(), x.k.data(), x.v.data(), exact.data(), lse.data(), RefMode::exact);
  attention_ref_forward(p, x.q.data(), x.k.data(), x.v.data(), naive.data(), lse.data(), RefMode::naive_bf16);
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    max_err = std::max(max_err, std::fabs(naive[i] - exact[i]));
    max_ref = std::max(max_ref, std::fabs(exact[i]));
    EXPECT_EQ(naive[i], round_bf16(naive[i])) << "naive output must be bf16-representable";
  }
  EXPECT_GT(max_err, 1e-4 * max_ref);  // it does round
  EXPECT_LT(max_err, 2e-2 * max_ref);  // by bf16-sized amounts
}

}  // namespace
}  // namespace vlm::flash
