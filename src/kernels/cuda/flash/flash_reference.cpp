// CPU reference attention: float64 ("exact") and a naive-bf16 emulation (see flash_reference.h). Parallel over
// (sequence, head) with OpenMP; each output element is computed by exactly one thread.
#include "kernels/cuda/flash/flash_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/status.h"

namespace vlm::flash {

double round_bf16(double x) { return bf16_to_f32(f32_to_bf16(static_cast<float>(x))); }

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

void check_problem(const RefProblem& p) {
  VLM_CHECK(p.batch() >= 0 && p.cu_seqlens_k.size() == p.cu_seqlens_q.size(), "cu_seqlens sizes differ");
  VLM_CHECK(p.cu_seqlens_q.front() == 0 && p.cu_seqlens_k.front() == 0, "cu_seqlens must start at 0");
  for (int b = 0; b < p.batch(); ++b)
    VLM_CHECK(p.cu_seqlens_q[b + 1] >= p.cu_seqlens_q[b] && p.cu_seqlens_k[b + 1] >= p.cu_seqlens_k[b],
              "cu_seqlens must be non-decreasing");
  VLM_CHECK(p.n_heads_kv > 0 && p.n_heads_q % p.n_heads_kv == 0, "Hq must be a multiple of Hkv");
}

// Row pointers into the packed [T, H, D] layout.
struct Rows {
  const double* base;
  int n_heads, head_dim;
  const double* row(int64_t t, int h) const { return base + (t * n_heads + h) * head_dim; }
};

double dot(const double* a, const double* b, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
float dot_f32(const double* a, const double* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<float>(a[i]) * static_cast<float>(b[i]);
  return s;
}

// One (sequence, q head) of the forward.
void forward_head(const RefProblem& p, int b, int h, const Rows& q, const Rows& k, const Rows& v, double* out,
                  double* lse, RefMode mode) {
  const int d = p.head_dim, hk = h / (p.n_heads_q / p.n_heads_kv);
  const int64_t q0 = p.cu_seqlens_q[b], lq = p.cu_seqlens_q[b + 1] - q0;
  const int64_t k0 = p.cu_seqlens_k[b], lk = p.cu_seqlens_k[b + 1] - k0;
  const int64_t tq = p.total_q();
  std::vector<double> s(static_cast<size_t>(lk));
  for (int64_t i = 0; i < lq; ++i) {
    double* o = out + ((q0 + i) * p.n_heads_q + h) * d;
    std::fill(o, o + d, 0.0);
    double m = kNegInf;
    for (int64_t j = 0; j < lk; ++j) {
      if (!p.visible(i, j, lq, lk)) {
        s[j] = kNegInf;
        continue;
      }
      if (mode == RefMode::exact) {
        s[j] = p.scale * dot(q.row(q0 + i, h), k.row(k0 + j, hk), d);
      } else {
        s[j] = round_bf16(dot_f32(q.row(q0 + i, h), k.row(k0 + j, hk), d) * static_cast<float>(p.scale));
      }
      m = std::max(m, s[j]);
    }
    if (m == kNegInf) {  // no visible key
      lse[h * tq + q0 + i] = kNegInf;
      continue;
    }
    if (mode == RefMode::exact) {
      double l = 0;
      for (int64_t j = 0; j < lk; ++j) l += s[j] == kNegInf ? 0.0 : std::exp(s[j] - m);
      for (int64_t j = 0; j < lk; ++j) {
        if (s[j] == kNegInf) continue;
        const double pj = std::exp(s[j] - m) / l;
        const double* vr = v.row(k0 + j, hk);
        for (int c = 0; c < d; ++c) o[c] += pj * vr[c];
      }
      lse[h * tq + q0 + i] = m + std::log(l);
    } else {
      float l = 0;
      for (int64_t j = 0; j < lk; ++j) l += s[j] == kNegInf ? 0.f : std::exp(static_cast<float>(s[j] - m));
      std::vector<float> acc(static_cast<size_t>(d), 0.f);
      for (int64_t j = 0; j < lk; ++j) {
        if (s[j] == kNegInf) continue;
        const float pj = static_cast<float>(round_bf16(std::exp(static_cast<float>(s[j] - m)) / l));
        const double* vr = v.row(k0 + j, hk);
        for (int c = 0; c < d; ++c) acc[c] += pj * static_cast<float>(vr[c]);
      }
      for (int c = 0; c < d; ++c) o[c] = round_bf16(acc[c]);
      lse[h * tq + q0 + i] = static_cast<float>(m) + std::log(l);
    }
  }
}

// One (sequence, kv head) of the backward: loops over the q heads of the group so dk/dv sum without races.
void backward_head(const RefProblem& p, int b, int hk, const Rows& q, const Rows& k, const Rows& v, const Rows& out,
                   const double* lse, const Rows& dout, double* dq, double* dk, double* dv, RefMode mode) {
  const int d = p.head_dim, group = p.n_heads_q / p.n_heads_kv;
  const int64_t q0 = p.cu_seqlens_q[b], lq = p.cu_seqlens_q[b + 1] - q0;
  const int64_t k0 = p.cu_seqlens_k[b], lk = p.cu_seqlens_k[b + 1] - k0;
  const int64_t tq = p.total_q();
  const bool naive = mode == RefMode::naive_bf16;
  // dk/dv accumulators for this kv head: [lk, d].
  std::vector<double> dk_acc(static_cast<size_t>(lk * d), 0.0), dv_acc(static_cast<size_t>(lk * d), 0.0);
  std::vector<double> prob(static_cast<size_t>(lk)), dp(static_cast<size_t>(lk)), s(static_cast<size_t>(lk));
  for (int h = hk * group; h < (hk + 1) * group; ++h) {
    for (int64_t i = 0; i < lq; ++i) {
      const double* qr = q.row(q0 + i, h);
      const double* dor = dout.row(q0 + i, h);
      double* dqr = dq + ((q0 + i) * p.n_heads_q + h) * d;
      std::fill(dqr, dqr + d, 0.0);
      // Probabilities of this row.
      bool any = false;
      if (!naive) {
        const double row_lse = lse[h * tq + q0 + i];
        for (int64_t j = 0; j < lk; ++j) {
          const bool vis = p.visible(i, j, lq, lk) && row_lse != kNegInf;
          prob[j] = vis ? std::exp(p.scale * dot(qr, k.row(k0 + j, hk), d) - row_lse) : 0.0;
          any = any || vis;
        }
      } else {
        double m = kNegInf;
        for (int64_t j = 0; j < lk; ++j) {
          s[j] = p.visible(i, j, lq, lk)
                     ? round_bf16(dot_f32(qr, k.row(k0 + j, hk), d) * static_cast<float>(p.scale))
                     : kNegInf;
          m = std::max(m, s[j]);
        }
        any = m != kNegInf;
        float l = 0;
        for (int64_t j = 0; j < lk; ++j) l += s[j] == kNegInf ? 0.f : std::exp(static_cast<float>(s[j] - m));
        for (int64_t j = 0; j < lk; ++j)
          prob[j] = s[j] == kNegInf ? 0.0 : round_bf16(std::exp(static_cast<float>(s[j] - m)) / l);
      }
      if (!any) continue;  // dq row stays 0; nothing flows to dk/dv
      // dP and the row term D.
      // exact: D = dout . out (what the kernels use); naive: D = sum_j P dP in fp32 (softmax's own backward).
      float drow_f32 = 0;
      for (int64_t j = 0; j < lk; ++j) {
        if (!p.visible(i, j, lq, lk)) {
          dp[j] = 0;
          continue;
        }
        dp[j] = naive ? round_bf16(dot_f32(dor, v.row(k0 + j, hk), d)) : dot(dor, v.row(k0 + j, hk), d);
        if (naive) drow_f32 += static_cast<float>(prob[j] * dp[j]);
      }
      const double drow = naive ? static_cast<double>(drow_f32) : dot(dor, out.row(q0 + i, h), d);
      for (int64_t j = 0; j < lk; ++j) {
        if (!p.visible(i, j, lq, lk)) continue;
        double ds = prob[j] * (dp[j] - drow);
        if (naive) ds = round_bf16(static_cast<float>(ds));
        const double* kr = k.row(k0 + j, hk);
        for (int c = 0; c < d; ++c) {
          dqr[c] += ds * kr[c];
          dk_acc[j * d + c] += ds * qr[c];
          dv_acc[j * d + c] += prob[j] * dor[c];
        }
      }
      for (int c = 0; c < d; ++c) dqr[c] = naive ? round_bf16(static_cast<float>(p.scale * dqr[c])) : p.scale * dqr[c];
    }
  }
  for (int64_t j = 0; j < lk; ++j) {
    double* dkr = dk + ((k0 + j) * p.n_heads_kv + hk) * d;
    double* dvr = dv + ((k0 + j) * p.n_heads_kv + hk) * d;
    for (int c = 0; c < d; ++c) {
      const double gk = p.scale * dk_acc[j * d + c], gv = dv_acc[j * d + c];
      dkr[c] = naive ? round_bf16(static_cast<float>(gk)) : gk;
      dvr[c] = naive ? round_bf16(static_cast<float>(gv)) : gv;
    }
  }
}

}  // namespace

void attention_ref_forward(const RefProblem& p, const double* q, const double* k, const double* v, double* out,
                           double* lse, RefMode mode) {
  check_problem(p);
  const Rows qr{q, p.n_heads_q, p.head_dim}, kr{k, p.n_heads_kv, p.head_dim}, vr{v, p.n_heads_kv, p.head_dim};
  const int nb = p.batch(), nh = p.n_heads_q;
#pragma omp parallel for schedule(dynamic)
  for (int bh = 0; bh < nb * nh; ++bh) forward_head(p, bh / nh, bh % nh, qr, kr, vr, out, lse, mode);
}

void attention_ref_backward(const RefProblem& p, const double* q, const double* k, const double* v,
                            const double* out, const double* lse, const double* dout, double* dq, double* dk,
                            double* dv, RefMode mode) {
  check_problem(p);
  const int d = p.head_dim;
  const Rows qr{q, p.n_heads_q, d}, kr{k, p.n_heads_kv, d}, vr{v, p.n_heads_kv, d};
  const Rows outr{out, p.n_heads_q, d}, doutr{dout, p.n_heads_q, d};
  const int nb = p.batch(), nh = p.n_heads_kv;
#pragma omp parallel for schedule(dynamic)
  for (int bh = 0; bh < nb * nh; ++bh)
    backward_head(p, bh / nh, bh % nh, qr, kr, vr, outr, lse, doutr, dq, dk, dv, mode);
}

}  // namespace vlm::flash
