// Varlen multi-head attention with grouped-query heads and bottom-right causal masks: the plain reference.
// Forward: one task per (sequence, q head); each query row computes its scores, a max-subtracted softmax and the
// weighted sum of values, and saves lse. Backward: one task per (sequence, kv head), covering the q heads of its
// group in order; it recomputes the probabilities from lse (p = exp(s - lse)) and owns dq of those heads and dk/dv
// of its kv head, so every gradient element is summed by one thread in a fixed order (no atomics).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"

namespace vlm::ops::cpu {

namespace {

// Keys [0, n) that query row i of a sequence with lq queries and lk keys sees.
int64_t visible_keys(int64_t i, int64_t lq, int64_t lk, bool causal) {
  if (!causal) return lk;
  return std::clamp<int64_t>(i + lk - lq + 1, 0, lk);
}

}  // namespace

void check_cu_seqlens(const char* op, const char* name, const int32_t* cu, int64_t batch, int64_t tokens,
                      int max_seqlen) {
  VLM_CHECK(cu[0] == 0, "ops::", op, ": ", name, "[0] = ", cu[0], ", expected 0");
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = static_cast<int64_t>(cu[b + 1]) - cu[b];
    VLM_CHECK(len >= 0, "ops::", op, ": ", name, " decreases at ", b + 1, " (", cu[b], " -> ", cu[b + 1], ")");
    VLM_CHECK(len <= max_seqlen, "ops::", op, ": sequence ", b, " has length ", len, " > max_seqlen ", max_seqlen, " (",
              name, ")");
  }
  VLM_CHECK(cu[batch] == tokens, "ops::", op, ": ", name, "[", batch, "] = ", cu[batch], " but the tensor has ", tokens,
            " rows");
}

namespace {

void check_params(const char* op, const AttentionParams& p) {
  check_cu_seqlens(op, "cu_seqlens_q", p.cu_seqlens_q, p.batch, p.tokens_q, p.max_seqlen_q);
  check_cu_seqlens(op, "cu_seqlens_k", p.cu_seqlens_k, p.batch, p.tokens_k, p.max_seqlen_k);
}

int64_t attention_work(const AttentionParams& p) {
  return static_cast<int64_t>(p.max_seqlen_q) * p.max_seqlen_k * p.batch * p.heads_q * p.head_dim;
}

}  // namespace

void attention_forward(float* out, float* lse, const AttentionParams& p) {
  check_params("attention_forward", p);
  const int64_t dim = p.head_dim, group = p.heads_q / p.heads_kv;
  const int64_t stride_q = p.heads_q * dim, stride_k = p.heads_kv * dim;  // elements between consecutive tokens
  const int64_t tasks = p.batch * p.heads_q;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // Round-robin (static, 1) over (sequence, head): heads of one sequence cost the same, so threads stay balanced.
#pragma omp parallel if (attention_work(p) >= kParallelMinWork)
  {
    std::vector<float> probs(static_cast<size_t>(std::max(p.max_seqlen_k, 1)));
    std::vector<float> acc(static_cast<size_t>(dim));
#pragma omp for schedule(static, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / p.heads_q, h = task % p.heads_q, kvh = h / group;
      const int64_t q0 = p.cu_seqlens_q[b], lq = p.cu_seqlens_q[b + 1] - q0;
      const int64_t k0 = p.cu_seqlens_k[b], lk = p.cu_seqlens_k[b + 1] - k0;
      const float* keys = p.k + k0 * stride_k + kvh * dim;
      const float* values = p.v + k0 * stride_k + kvh * dim;
      for (int64_t i = 0; i < lq; ++i) {
        const float* qi = p.q + (q0 + i) * stride_q + h * dim;
        float* oi = out + (q0 + i) * stride_q + h * dim;
        float& lse_i = lse[h * p.tokens_q + q0 + i];
        const int64_t n = visible_keys(i, lq, lk, p.causal);
        if (n == 0) {
          std::fill(oi, oi + dim, 0.f);
          lse_i = neg_inf;
          continue;
        }
        lse_i = attend_row(
            oi, qi, [&](int64_t j) { return keys + j * stride_k; }, [&](int64_t j) { return values + j * stride_k; },
            n, dim, p.scale, probs.data(), acc.data());
      }
    }
  }
}

// With p_ij = exp(s_ij - lse_i), s_ij = scale q_i . k_j, and D_i = dout_i . out_i:
//   ds_ij = p_ij (dout_i . v_j - D_i);  dq_i = scale sum_j ds_ij k_j;  dk_j = scale sum_i ds_ij q_i;
//   dv_j = sum_i p_ij dout_i  (dk, dv also summed over the q heads of the group).
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                        const AttentionParams& p) {
  check_params("attention_backward", p);
  const int64_t dim = p.head_dim, group = p.heads_q / p.heads_kv;
  const int64_t stride_q = p.heads_q * dim, stride_k = p.heads_kv * dim;
  const int64_t tasks = p.batch * p.heads_kv;
  const float neg_inf = -std::numeric_limits<float>::infinity();
#pragma omp parallel if (attention_work(p) >= kParallelMinWork)
  {
    std::vector<float> dq_acc(static_cast<size_t>(dim));
#pragma omp for schedule(static, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / p.heads_kv, kvh = task % p.heads_kv;
      const int64_t q0 = p.cu_seqlens_q[b], lq = p.cu_seqlens_q[b + 1] - q0;
      const int64_t k0 = p.cu_seqlens_k[b], lk = p.cu_seqlens_k[b + 1] - k0;
      const float* keys = p.k + k0 * stride_k + kvh * dim;
      const float* values = p.v + k0 * stride_k + kvh * dim;
      float* dkeys = dk != nullptr ? dk + k0 * stride_k + kvh * dim : nullptr;
      float* dvalues = dv != nullptr ? dv + k0 * stride_k + kvh * dim : nullptr;
      for (int64_t j = 0; j < lk; ++j) {
        if (dkeys != nullptr) std::fill(dkeys + j * stride_k, dkeys + j * stride_k + dim, 0.f);
        if (dvalues != nullptr) std::fill(dvalues + j * stride_k, dvalues + j * stride_k + dim, 0.f);
      }
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int64_t i = 0; i < lq; ++i) {
          const int64_t row = (q0 + i) * stride_q + h * dim;
          const float* qi = p.q + row;
          const float* doi = dout + row;
          const float lse_i = lse[h * p.tokens_q + q0 + i];
          const int64_t n = visible_keys(i, lq, lk, p.causal);
          if (n == 0 || lse_i == neg_inf) {
            if (dq != nullptr) std::fill(dq + row, dq + row + dim, 0.f);
            continue;
          }
          const float delta = dot(doi, out + row, dim);
          std::fill(dq_acc.begin(), dq_acc.end(), 0.f);
          for (int64_t j = 0; j < n; ++j) {
            const float* kj = keys + j * stride_k;
            const float pij = std::exp(p.scale * dot(qi, kj, dim) - lse_i);
            const float ds = pij * (dot(doi, values + j * stride_k, dim) - delta);
            axpy(dq_acc.data(), kj, ds, dim);
            if (dkeys != nullptr) axpy(dkeys + j * stride_k, qi, p.scale * ds, dim);
            if (dvalues != nullptr) axpy(dvalues + j * stride_k, doi, pij, dim);
          }
          if (dq != nullptr)
            for (int64_t d = 0; d < dim; ++d) dq[row + d] = p.scale * dq_acc[static_cast<size_t>(d)];
        }
      }
    }
  }
}

}  // namespace vlm::ops::cpu
