// Portable FlashAttention forward (sm_80+: mma.sync m16n8k16 + cp.async). One CTA computes kBlockM query rows of
// one (sequence, q head); each warp owns 16 rows and keeps its S tile, running max/sum and O in registers
// (online softmax in base 2). K and V tiles are single-buffered but loaded one phase ahead: V(n) streams in while
// S = Q K(n)^T is computed, and K(n-1) while O += P V(n) is. Key blocks run from last to first, so only the
// first one or two steps need the causal / length mask.
#pragma once

#include <cmath>

#include "kernels/cuda/flash/flash_api.h"
#include "kernels/cuda/flash/flash_tiles.h"
#include "kernels/cuda/flash/flash_utils.cuh"
#include "kernels/cuda/pdl.cuh"

namespace vlm::flash {

template <int kHeadDim, class Element>
struct FwdKernelShape {
  using Tile = FwdTile<kHeadDim>;
  static constexpr int kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN, kWarps = Tile::kWarps;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kPitch = kHeadDim + 8;  // elements per smem row (16 bytes of padding)
  static constexpr int kSmemBytes = (kBlockM + 2 * kBlockN) * kPitch * static_cast<int>(sizeof(Element));
  static_assert(kBlockM == 16 * kWarps, "one warp per 16 query rows");
  static_assert(kBlockN % 16 == 0 && kHeadDim % 16 == 0, "MMA tiles are 16 wide");
};

template <int kHeadDim, class Element, bool kCausal>
__global__ void __launch_bounds__(FwdKernelShape<kHeadDim, Element>::kThreads, kHeadDim <= 64 ? 2 : 1)
    flash_fwd_kernel(const FlashFwdParams p) {
  pdl::grid_begin();
  using Shape = FwdKernelShape<kHeadDim, Element>;
  constexpr int kM = Shape::kBlockM, kN = Shape::kBlockN, kThreads = Shape::kThreads, kPitch = Shape::kPitch;
  constexpr float kInf = INFINITY;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Element* sQ = reinterpret_cast<Element*>(smem_raw);
  Element* sK = sQ + kM * kPitch;
  Element* sV = sK + kN * kPitch;

  const int m_block = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);  // heaviest blocks first
  const int h = blockIdx.y, b = blockIdx.z;
  const SeqBounds sb = seq_bounds(p.cu_seqlens_q, p.cu_seqlens_k, b);
  const int m0 = m_block * kM;
  if (m0 >= sb.q_len) return;
  const int hk = h / (p.n_heads_q / p.n_heads_kv);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int d = p.head_dim;
  const int m_rows = min(kM, sb.q_len - m0);
  const int diag = sb.k_len - sb.q_len;  // causal: query i sees keys j <= i + diag
  const int n_end = kCausal ? max(0, min(sb.k_len, m0 + m_rows + diag)) : sb.k_len;
  const int n_blocks = (n_end + kN - 1) / kN;

  const Element* q_base =
      static_cast<const Element*>(p.q) + static_cast<int64_t>(sb.q_start + m0) * p.q_row_stride + h * p.q_head_stride;
  const Element* k_base =
      static_cast<const Element*>(p.k) + static_cast<int64_t>(sb.k_start) * p.k_row_stride + hk * p.k_head_stride;
  const Element* v_base =
      static_cast<const Element*>(p.v) + static_cast<int64_t>(sb.k_start) * p.v_row_stride + hk * p.v_head_stride;

  float o[kHeadDim / 8][4];
#pragma unroll
  for (int j = 0; j < kHeadDim / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float row_max[2] = {-kInf, -kInf}, row_sum[2] = {0.f, 0.f};
  const float scale_log2 = p.scale * static_cast<float>(M_LOG2E);
  const int row_lo = m0 + warp * 16 + g;  // this thread's rows: row_lo and row_lo + 8

  if (n_blocks > 0) {
    load_tile_async<kM, kHeadDim, kPitch, kThreads>(sQ, q_base, p.q_row_stride, m_rows, d, tid);
    {
      const int n0 = (n_blocks - 1) * kN;
      load_tile_async<kN, kHeadDim, kPitch, kThreads>(sK, k_base + static_cast<int64_t>(n0) * p.k_row_stride,
                                                      p.k_row_stride, sb.k_len - n0, d, tid);
    }
    cp_async_commit();
    for (int nb = n_blocks - 1; nb >= 0; --nb) {
      const int n0 = nb * kN;
      cp_async_wait<0>();
      __syncthreads();  // K(nb) landed; every warp is done with V(nb + 1)
      load_tile_async<kN, kHeadDim, kPitch, kThreads>(sV, v_base + static_cast<int64_t>(n0) * p.v_row_stride,
                                                      p.v_row_stride, sb.k_len - n0, d, tid);
      cp_async_commit();

      // S = Q K^T for this warp's 16 rows.
      float s[kN / 8][4];
#pragma unroll
      for (int j = 0; j < kN / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 16; ++kk) {
        uint32_t a[4];
        ldmatrix_x4(a, sQ + (warp * 16 + lane % 16) * kPitch + kk * 16 + (lane / 16) * 8);
#pragma unroll
        for (int nj = 0; nj < kN / 16; ++nj) {
          uint32_t bk[4];
          ldmatrix_x4(bk, sK + (nj * 16 + (lane / 16) * 8 + lane % 8) * kPitch + kk * 16 + ((lane / 8) & 1) * 8);
          mma_16816<Element>(s[2 * nj], a, bk[0], bk[1]);
          mma_16816<Element>(s[2 * nj + 1], a, bk[2], bk[3]);
        }
      }

      // Mask keys past the sequence end and, when causal, keys right of the diagonal.
      const bool need_mask = n0 + kN > sb.k_len || (kCausal && n0 + kN - 1 > m0 + diag);
      if (need_mask) {
#pragma unroll
        for (int j = 0; j < kN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = n0 + 8 * j + 2 * t + (e & 1), row = row_lo + (e >> 1) * 8;
            if (col >= sb.k_len || (kCausal && col > row + diag)) s[j][e] = -kInf;
          }
      }

      // Online softmax: rescale the running sum and O by exp2(old max - new max).
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = row_max[r];
#pragma unroll
        for (int j = 0; j < kN / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
        mx = quad_max(mx);
        const float m_scaled = mx == -kInf ? 0.f : mx * scale_log2;
        const float corr = exp2_ftz(row_max[r] * scale_log2 - m_scaled);
        row_max[r] = mx;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < kN / 8; ++j) {
          s[j][2 * r] = exp2_ftz(fmaf(s[j][2 * r], scale_log2, -m_scaled));
          s[j][2 * r + 1] = exp2_ftz(fmaf(s[j][2 * r + 1], scale_log2, -m_scaled));
          sum += s[j][2 * r] + s[j][2 * r + 1];
        }
        row_sum[r] = row_sum[r] * corr + sum;
#pragma unroll
        for (int j = 0; j < kHeadDim / 8; ++j) {
          o[j][2 * r] *= corr;
          o[j][2 * r + 1] *= corr;
        }
      }

      cp_async_wait<0>();
      __syncthreads();  // V(nb) landed; every warp is done with K(nb)
      if (nb > 0) {
        const int n_prev = n0 - kN;
        load_tile_async<kN, kHeadDim, kPitch, kThreads>(sK, k_base + static_cast<int64_t>(n_prev) * p.k_row_stride,
                                                        p.k_row_stride, sb.k_len - n_prev, d, tid);
        cp_async_commit();
      }

      // O += P V, P straight from the S registers.
#pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk) {
        uint32_t a[4];
        acc_to_a_frag<Element>(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int dj = 0; dj < kHeadDim / 16; ++dj) {
          uint32_t bv[4];
          ldmatrix_x4_trans(bv, sV + (kk * 16 + ((lane / 8) & 1) * 8 + lane % 8) * kPitch + dj * 16 + (lane / 16) * 8);
          mma_16816<Element>(o[2 * dj], a, bv[0], bv[1]);
          mma_16816<Element>(o[2 * dj + 1], a, bv[2], bv[3]);
        }
      }
    }
  }

  // Epilogue: normalize, write O (rows past the sequence skipped, padded columns skipped) and the lse.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(row_sum[r]);
    const int row = row_lo + 8 * r;
    if (row >= sb.q_len) continue;
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    if (t == 0) {
      const float lse = sum > 0.f ? (row_max[r] * scale_log2 + log2f(sum)) * static_cast<float>(M_LN2) : -kInf;
      p.lse[h * p.lse_head_stride + sb.q_start + row] = lse;
    }
    Element* orow =
        static_cast<Element*>(p.out) + static_cast<int64_t>(sb.q_start + row) * p.out_row_stride + h * p.out_head_stride;
#pragma unroll
    for (int j = 0; j < kHeadDim / 8; ++j) {
      const int col = 8 * j + 2 * t;
      if (col < d) *reinterpret_cast<uint32_t*>(orow + col) = pack2<Element>(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
    }
  }
}

}  // namespace vlm::flash
