// CPU reference attention (the oracle for our FlashAttention kernels), forward and backward, on packed
// variable-length batches with grouped-query heads and bottom-right-aligned causal masks (see flash_api.h).
// Two modes:
//   exact       every product and sum in float64;
//   naive_bf16  what a straightforward bf16 implementation computes: fp32 accumulation, but the scores S, the
//               probabilities P, the output O, and in the backward dP, dS, dq, dk, dv rounded to bf16 where such an
//               implementation would store them. Its error against `exact` sets the tests' tolerance
//               (err(ours) <= k * err(naive_bf16) + floor, as flash-attention's tests do).
// Arrays are dense row-major: q/out/dout/dq [Tq, Hq, D], k/v/dk/dv [Tk, Hkv, D], lse [Hq, Tq].
#pragma once

#include <cstdint>
#include <vector>

namespace vlm::flash {

enum class RefMode { exact, naive_bf16 };

struct RefProblem {
  std::vector<int32_t> cu_seqlens_q;  // [B + 1], starting at 0
  std::vector<int32_t> cu_seqlens_k;  // [B + 1], starting at 0
  int n_heads_q = 1, n_heads_kv = 1, head_dim = 1;
  double scale = 1.0;
  bool causal = false;

  int batch() const { return static_cast<int>(cu_seqlens_q.size()) - 1; }
  int64_t total_q() const { return cu_seqlens_q.back(); }
  int64_t total_k() const { return cu_seqlens_k.back(); }
  // True when query i (0-based within its sequence) sees key j, with Lq queries and Lk keys in that sequence.
  bool visible(int64_t i, int64_t j, int64_t lq, int64_t lk) const { return !causal || j <= i + lk - lq; }
};

// out [Tq, Hq, D]; lse [Hq, Tq] (-inf and out = 0 for rows that see no key).
void attention_ref_forward(const RefProblem& p, const double* q, const double* k, const double* v, double* out,
                           double* lse, RefMode mode);

// dq, dk, dv overwritten. `out` and `lse` are the forward's (from the same mode or from the kernel under test).
void attention_ref_backward(const RefProblem& p, const double* q, const double* k, const double* v,
                            const double* out, const double* lse, const double* dout, double* dq, double* dk,
                            double* dv, RefMode mode);

// Rounds to the nearest bf16 value (ties to even), returned as a double.
double round_bf16(double x);

}  // namespace vlm::flash
