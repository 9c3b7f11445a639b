// Portable FlashAttention backward (sm_80+), FlashAttention-2's algorithm in three kernels:
//   1. dot_do_o:  D[h, t] = sum_c dO[t, h, c] * O[t, h, c] (fp32), the softmax-backward row term.
//   2. dkdv:      one CTA per (key block, kv head, sequence) keeps dK, dV of its keys in registers and walks every
//                 (q head of the group, query block) that sees them: S^T = K Q^T, P^T = exp(S^T - lse),
//                 dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - D), dK += dS^T Q. Each warp owns 16 keys, so
//                 P^T and dS^T never leave registers. Q, dO, lse and D are double-buffered (the next query block
//                 loads during this one). In the atomic mode it also adds dQ += dS K into an fp32 buffer.
//   3. dq:        deterministic mode only: one CTA per (query block, q head, sequence) recomputes P and dS over
//                 the keys in a fixed order and writes dQ, so no float addition order depends on scheduling. It
//                 runs first and computes D itself (no rowsum kernel); dkdv then reads that D.
//   (4. convert_dq: atomic mode, fp32 buffer * scale -> dq.)
#pragma once

#include <algorithm>
#include <cmath>

#include "core/cuda_check.h"

#include "kernels/cuda/flash/flash_api.h"
#include "kernels/cuda/flash/flash_tiles.h"
#include "kernels/cuda/flash/flash_utils.cuh"
#include "kernels/cuda/pdl.cuh"

namespace vlm::flash {

// One thread's part of rowsum(dO ∘ O) for row (tok, h): the 8-column chunks from column `first` on, every `step`
// columns (16-byte loads); the callers' shuffles over the threads sharing the row give the sum.
template <class Element>
__device__ __forceinline__ float partial_dot_do_o(const FlashBwdParams& p, int64_t tok, int h, int first, int step) {
  const Element* dor = static_cast<const Element*>(p.dout) + tok * p.dout_row_stride + h * p.dout_head_stride;
  const Element* orow = static_cast<const Element*>(p.out) + tok * p.out_row_stride + h * p.out_head_stride;
  float acc = 0.f;
  for (int c = first; c < p.head_dim; c += step) {
    const uint4 a = *reinterpret_cast<const uint4*>(dor + c);
    const uint4 o = *reinterpret_cast<const uint4*>(orow + c);
    const Element* ae = reinterpret_cast<const Element*>(&a);
    const Element* oe = reinterpret_cast<const Element*>(&o);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc += to_float<Element>(ae[i]) * to_float<Element>(oe[i]);
  }
  return acc;
}

// D[h, t] = rowsum(dO ∘ O) into dsum[h * stats_stride + t], 8 threads per (token, head) row, 16-byte loads; with
// lse_log2, also lse * log2(e) at the same place of that array (the Hopper backward loads both with TMA); with
// dq_accum, also zeroes that row's accum_dim floats of the dQ accumulator (one launch instead of a memset more).
template <class Element>
__global__ void __launch_bounds__(256)
    flash_bwd_dot_do_o_kernel(const FlashBwdParams p, float* dsum, int64_t stats_stride, float* lse_log2,
                              float* dq_accum = nullptr, int accum_dim = 0) {
  pdl::grid_begin();
  const int64_t n_rows = static_cast<int64_t>(p.total_q) * p.n_heads_q;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x / 8;
  const int sub = threadIdx.x % 8;
  const bool valid = row < n_rows;
  const int64_t tok = valid ? row / p.n_heads_q : 0;
  const int h = valid ? static_cast<int>(row % p.n_heads_q) : 0;
  float acc = valid ? partial_dot_do_o<Element>(p, tok, h, sub * 8, 64) : 0.f;
  if (dq_accum != nullptr && valid) {  // the 8 threads of a row write 128 contiguous bytes per step
    float4* z = reinterpret_cast<float4*>(dq_accum + row * accum_dim);
    for (int c = sub; c < accum_dim / 4; c += 8) z[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  acc += __shfl_xor_sync(0xffffffffu, acc, 1);
  acc += __shfl_xor_sync(0xffffffffu, acc, 2);
  acc += __shfl_xor_sync(0xffffffffu, acc, 4);
  if (valid && sub == 0) {
    dsum[h * stats_stride + tok] = acc;
    if (lse_log2) {
      // The Hopper backward's copy of lse in log2 units; a row that saw no key (lse = -inf) sees none in the
      // backward either, and +inf makes its P exactly 0 there.
      const float lse = p.lse[h * p.lse_head_stride + tok];
      lse_log2[h * stats_stride + tok] = lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
    }
  }
}

// dq[t, h, c] = scale * dq_accum[t, h, c] for c < head_dim (the accumulator rows are accum_dim wide). A thread
// converts 4 columns of a row (one 16-byte load, one 8-byte store: head_dim and dq's strides are multiples of 8,
// flash_api checks), so a warp's loads cover whole consecutive accumulator rows (with 8 columns a thread, each load
// instruction touched every other 16 bytes: ncu counted 40% excess sectors), and walks rows by the grid stride,
// carrying the (token, head) split of its row index forward: two divisions per thread before its loop.
template <class Element>
__global__ void __launch_bounds__(256)
    flash_bwd_convert_dq_kernel(const FlashBwdParams p, const float* dq_accum, int accum_dim) {
  pdl::grid_begin();
  const int per_row = p.head_dim / 4, rows_per_block = static_cast<int>(blockDim.x) / per_row;
  const int local_row = static_cast<int>(threadIdx.x) / per_row, c = (static_cast<int>(threadIdx.x) % per_row) * 4;
  const int64_t n_rows = static_cast<int64_t>(p.total_q) * p.n_heads_q;
  int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block + local_row;
  if (local_row >= rows_per_block || row >= n_rows) return;
  const int heads = p.n_heads_q;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * rows_per_block;
  const int64_t stride_tok = stride / heads;
  const int stride_h = static_cast<int>(stride - stride_tok * heads);
  int64_t tok = row / heads;
  int h = static_cast<int>(row - tok * heads);
  for (; row < n_rows; row += stride) {
    const float4 a = *reinterpret_cast<const float4*>(dq_accum + row * accum_dim + c);
    uint2 out;
    out.x = pack2<Element>(a.x * p.scale, a.y * p.scale);
    out.y = pack2<Element>(a.z * p.scale, a.w * p.scale);
    *reinterpret_cast<uint2*>(static_cast<Element*>(p.dq) + tok * p.dq_row_stride + h * p.dq_head_stride + c) = out;
    tok += stride_tok;
    h += stride_h;
    if (h >= heads) {
      h -= heads;
      ++tok;
    }
  }
}

// Launches the conversion above over every (token, q head) row; nothing when there is none.
template <class Element>
void launch_convert_dq(const FlashBwdParams& p, const float* dq_accum, int accum_dim, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(p.total_q) * p.n_heads_q;
  if (rows <= 0) return;
  const int rows_per_block = 256 / (p.head_dim / 4);
  const int64_t blocks = std::min<int64_t>((rows + rows_per_block - 1) / rows_per_block, 132 * 16);
  pdl::launch(flash_bwd_convert_dq_kernel<Element>, static_cast<unsigned>(blocks), 256, 0, stream, p, dq_accum,
              accum_dim);
  VLM_CUDA_CHECK_LAUNCH();
}

template <int kHeadDim, class Element>
struct BwdKernelShape {
  using Tile = BwdTile<kHeadDim>;
  static constexpr int kBlockN = Tile::kBlockN, kBlockM = Tile::kBlockM, kWarpsN = Tile::kWarpsN;
  static constexpr int kSplitD = Tile::kSplitD, kWarps = kWarpsN * kSplitD, kThreads = kWarps * 32;
  static constexpr int kDPart = kHeadDim / kSplitD;  // head-dim columns of dK/dV owned by one warp
  static constexpr int kPitch = kHeadDim + 8, kDsPitch = kBlockM + 8;
  static constexpr int kElems = (2 * kBlockN + 4 * kBlockM) * kPitch + kBlockN * kDsPitch;
  static constexpr int kSmemBytes = kElems * static_cast<int>(sizeof(Element)) + 4 * kBlockM * 4;
  // dQ phase: warps split the query rows in 16s, then the head dim.
  static constexpr int kDqRowGroups = kBlockM / 16, kDqDParts = kWarps / kDqRowGroups;
  static constexpr int kDqCols = kHeadDim / kDqDParts;
  static constexpr int kDqChunk = kDqCols % 64 == 0 ? 64 : kDqCols % 32 == 0 ? 32 : 16;  // bounds the dQ registers
  static_assert(kBlockN == 16 * kWarpsN, "one warp row-group per 16 keys");
  static_assert(kWarps % kDqRowGroups == 0 && kDqCols % kDqChunk == 0 && kDqChunk % 16 == 0, "dQ split");
  static_assert(kDPart % 16 == 0 && kBlockM % 16 == 0, "MMA tiles are 16 wide");
};

template <int kHeadDim, class Element, bool kCausal, bool kAtomicDq>
__global__ void __launch_bounds__(BwdKernelShape<kHeadDim, Element>::kThreads)
    flash_bwd_dkdv_kernel(const FlashBwdParams p, float* dq_accum, const float* dsum) {
  pdl::grid_begin();
  using Shape = BwdKernelShape<kHeadDim, Element>;
  constexpr int kN = Shape::kBlockN, kM = Shape::kBlockM, kThreads = Shape::kThreads, kPitch = Shape::kPitch;
  constexpr int kDPart = Shape::kDPart, kDsPitch = Shape::kDsPitch;
  constexpr float kInf = INFINITY;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Element* sK = reinterpret_cast<Element*>(smem_raw);
  Element* sV = sK + kN * kPitch;
  Element* sQ0 = sV + kN * kPitch;          // [2][kM][kPitch]
  Element* sdO0 = sQ0 + 2 * kM * kPitch;    // [2][kM][kPitch]
  Element* sdS = sdO0 + 2 * kM * kPitch;    // [kN][kDsPitch]: dS^T, keys x queries
  float* sLse = reinterpret_cast<float*>(sdS + kN * kDsPitch);  // [2][kM], log2 units
  float* sD = sLse + 2 * kM;                                     // [2][kM]

  const int n_block = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const SeqBounds sb = seq_bounds(p.cu_seqlens_q, p.cu_seqlens_k, b);
  const int n0 = n_block * kN;
  if (n0 >= sb.k_len) return;
  const int group = p.n_heads_q / p.n_heads_kv;
  const int d = p.head_dim;
  const int diag = sb.k_len - sb.q_len;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int wn = warp % Shape::kWarpsN, wd = warp / Shape::kWarpsN;
  const float scale_log2 = p.scale * static_cast<float>(M_LOG2E);

  // Query blocks that see at least one key of this block: causal needs i + diag >= n0.
  const int m_first = kCausal ? max(0, n0 - diag) / kM : 0;
  const int m_count = max(0, (sb.q_len + kM - 1) / kM - m_first);
  const int n_iters = m_count * group;

  const Element* k_base = static_cast<const Element*>(p.k) +
                          static_cast<int64_t>(sb.k_start + n0) * p.k_row_stride + hk * p.k_head_stride;
  const Element* v_base = static_cast<const Element*>(p.v) +
                          static_cast<int64_t>(sb.k_start + n0) * p.v_row_stride + hk * p.v_head_stride;
  load_tile_async<kN, kHeadDim, kPitch, kThreads>(sK, k_base, p.k_row_stride, sb.k_len - n0, d, tid);
  load_tile_async<kN, kHeadDim, kPitch, kThreads>(sV, v_base, p.v_row_stride, sb.k_len - n0, d, tid);
  cp_async_commit();

  auto load_q_block = [&](int it, int buf) {
    const int h = hk * group + it / m_count;
    const int m0 = (m_first + it % m_count) * kM;
    const int64_t row0 = sb.q_start + m0;
    load_tile_async<kM, kHeadDim, kPitch, kThreads>(
        sQ0 + buf * kM * kPitch, static_cast<const Element*>(p.q) + row0 * p.q_row_stride + h * p.q_head_stride,
        p.q_row_stride, sb.q_len - m0, d, tid);
    load_tile_async<kM, kHeadDim, kPitch, kThreads>(
        sdO0 + buf * kM * kPitch,
        static_cast<const Element*>(p.dout) + row0 * p.dout_row_stride + h * p.dout_head_stride, p.dout_row_stride,
        sb.q_len - m0, d, tid);
    for (int i = tid; i < kM; i += kThreads) {
      const bool in = m0 + i < sb.q_len;
      const float lse = in ? p.lse[h * p.lse_head_stride + row0 + i] : -kInf;
      // A row that saw no key has lse = -inf and no visible key here either; +inf makes its P exactly 0.
      sLse[buf * kM + i] = lse == -kInf ? kInf : lse * static_cast<float>(M_LOG2E);
      sD[buf * kM + i] = in ? dsum[h * static_cast<int64_t>(p.total_q) + row0 + i] : 0.f;
    }
  };

  float dk[kDPart / 8][4], dv[kDPart / 8][4];
#pragma unroll
  for (int j = 0; j < kDPart / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[j][e] = dv[j][e] = 0.f;

  if (n_iters > 0) {
    load_q_block(0, 0);
    cp_async_commit();
  }
  const int key_lo = n0 + wn * 16 + g;  // this thread's keys: key_lo and key_lo + 8
  for (int it = 0; it < n_iters; ++it) {
    const int buf = it & 1;
    if (it + 1 < n_iters) {
      load_q_block(it + 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int h = hk * group + it / m_count;
    const int m0 = (m_first + it % m_count) * kM;
    const Element* sQ = sQ0 + buf * kM * kPitch;
    const Element* sdO = sdO0 + buf * kM * kPitch;
    const float* lse = sLse + buf * kM;
    const float* dsr = sD + buf * kM;

    // S^T = K Q^T (16 keys x kM queries per warp).
    float st[kM / 8][4];
#pragma unroll
    for (int j = 0; j < kM / 8; ++j) st[j][0] = st[j][1] = st[j][2] = st[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, sK + (wn * 16 + lane % 16) * kPitch + kk * 16 + (lane / 16) * 8);
#pragma unroll
      for (int qj = 0; qj < kM / 16; ++qj) {
        uint32_t bq[4];
        ldmatrix_x4(bq, sQ + (qj * 16 + (lane / 16) * 8 + lane % 8) * kPitch + kk * 16 + ((lane / 8) & 1) * 8);
        mma_16816<Element>(st[2 * qj], a, bq[0], bq[1]);
        mma_16816<Element>(st[2 * qj + 1], a, bq[2], bq[3]);
      }
    }
    // P^T = exp(S^T * scale - lse), zero where masked.
#pragma unroll
    for (int j = 0; j < kM / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = 8 * j + 2 * t + (e & 1), key = key_lo + (e >> 1) * 8;
        const bool vis = key < sb.k_len && m0 + qi < sb.q_len && (!kCausal || key <= m0 + qi + diag);
        st[j][e] = vis ? exp2_ftz(fmaf(st[j][e], scale_log2, -lse[qi])) : 0.f;
      }
    // dV += P^T dO.
#pragma unroll
    for (int kk = 0; kk < kM / 16; ++kk) {
      uint32_t a[4];
      acc_to_a_frag<Element>(a, st[2 * kk], st[2 * kk + 1]);
#pragma unroll
      for (int dj = 0; dj < kDPart / 16; ++dj) {
        uint32_t bo[4];
        ldmatrix_x4_trans(bo, sdO + (kk * 16 + ((lane / 8) & 1) * 8 + lane % 8) * kPitch + wd * kDPart + dj * 16 +
                                  (lane / 16) * 8);
        mma_16816<Element>(dv[2 * dj], a, bo[0], bo[1]);
        mma_16816<Element>(dv[2 * dj + 1], a, bo[2], bo[3]);
      }
    }
    // dP^T = V dO^T.
    float dpt[kM / 8][4];
#pragma unroll
    for (int j = 0; j < kM / 8; ++j) dpt[j][0] = dpt[j][1] = dpt[j][2] = dpt[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, sV + (wn * 16 + lane % 16) * kPitch + kk * 16 + (lane / 16) * 8);
#pragma unroll
      for (int qj = 0; qj < kM / 16; ++qj) {
        uint32_t bo[4];
        ldmatrix_x4(bo, sdO + (qj * 16 + (lane / 16) * 8 + lane % 8) * kPitch + kk * 16 + ((lane / 8) & 1) * 8);
        mma_16816<Element>(dpt[2 * qj], a, bo[0], bo[1]);
        mma_16816<Element>(dpt[2 * qj + 1], a, bo[2], bo[3]);
      }
    }
    // dS^T = P^T (dP^T - D).
#pragma unroll
    for (int j = 0; j < kM / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) dpt[j][e] = st[j][e] * (dpt[j][e] - dsr[8 * j + 2 * t + (e & 1)]);
    // dK += dS^T Q (the softmax scale is applied at the end).
#pragma unroll
    for (int kk = 0; kk < kM / 16; ++kk) {
      uint32_t a[4];
      acc_to_a_frag<Element>(a, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
      for (int dj = 0; dj < kDPart / 16; ++dj) {
        uint32_t bq[4];
        ldmatrix_x4_trans(bq, sQ + (kk * 16 + ((lane / 8) & 1) * 8 + lane % 8) * kPitch + wd * kDPart + dj * 16 +
                                  (lane / 16) * 8);
        mma_16816<Element>(dk[2 * dj], a, bq[0], bq[1]);
        mma_16816<Element>(dk[2 * dj + 1], a, bq[2], bq[3]);
      }
    }

    if constexpr (kAtomicDq) {
      // dQ[m0 .. m0 + kM) += dS K, reduced over this block's keys through smem, then fp32 atomics.
      if (wd == 0) {
#pragma unroll
        for (int j = 0; j < kM / 8; ++j) {
          const int col = 8 * j + 2 * t, row = wn * 16 + g;
          *reinterpret_cast<uint32_t*>(sdS + row * kDsPitch + col) = pack2<Element>(dpt[j][0], dpt[j][1]);
          *reinterpret_cast<uint32_t*>(sdS + (row + 8) * kDsPitch + col) = pack2<Element>(dpt[j][2], dpt[j][3]);
        }
      }
      __syncthreads();
      const int rg = warp % Shape::kDqRowGroups, dpart = warp / Shape::kDqRowGroups;
      constexpr int kChunk = Shape::kDqChunk;
#pragma unroll
      for (int ci = 0; ci < Shape::kDqCols / kChunk; ++ci) {
        const int c0 = dpart * Shape::kDqCols + ci * kChunk;
        float acc[kChunk / 8][4];
#pragma unroll
        for (int j = 0; j < kChunk / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < kN / 16; ++kk) {
          uint32_t a[4];
          ldmatrix_x4_trans(a, sdS + (kk * 16 + (lane / 16) * 8 + lane % 8) * kDsPitch + rg * 16 + ((lane / 8) & 1) * 8);
#pragma unroll
          for (int dj = 0; dj < kChunk / 16; ++dj) {
            uint32_t bk[4];
            ldmatrix_x4_trans(bk, sK + (kk * 16 + ((lane / 8) & 1) * 8 + lane % 8) * kPitch + c0 + dj * 16 +
                                      (lane / 16) * 8);
            mma_16816<Element>(acc[2 * dj], a, bk[0], bk[1]);
            mma_16816<Element>(acc[2 * dj + 1], a, bk[2], bk[3]);
          }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = m0 + rg * 16 + g + 8 * r;
          if (row >= sb.q_len) continue;
          float* dst = dq_accum + (static_cast<int64_t>(sb.q_start + row) * p.n_heads_q + h) * kHeadDim + c0;
#pragma unroll
          for (int j = 0; j < kChunk / 8; ++j) {
            if (c0 + 8 * j + 2 * t >= d) continue;
            atomicAdd(dst + 8 * j + 2 * t, acc[j][2 * r]);
            atomicAdd(dst + 8 * j + 2 * t + 1, acc[j][2 * r + 1]);
          }
        }
      }
    }
    __syncthreads();  // the next prefetch overwrites this iteration's buffers (and sdS)
  }
  cp_async_wait<0>();

  // dK = scale * sum dS^T Q, dV = sum P^T dO.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key_lo + 8 * r;
    if (key >= sb.k_len) continue;
    Element* dkr = static_cast<Element*>(p.dk) + static_cast<int64_t>(sb.k_start + key) * p.dk_row_stride +
                   hk * p.dk_head_stride;
    Element* dvr = static_cast<Element*>(p.dv) + static_cast<int64_t>(sb.k_start + key) * p.dv_row_stride +
                   hk * p.dv_head_stride;
#pragma unroll
    for (int j = 0; j < kDPart / 8; ++j) {
      const int col = wd * kDPart + 8 * j + 2 * t;
      if (col >= d) continue;
      *reinterpret_cast<uint32_t*>(dkr + col) = pack2<Element>(dk[j][2 * r] * p.scale, dk[j][2 * r + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(dvr + col) = pack2<Element>(dv[j][2 * r], dv[j][2 * r + 1]);
    }
  }
}

template <int kHeadDim, class Element>
struct DqKernelShape {
  using Tile = DqTile<kHeadDim>;
  static constexpr int kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN, kWarps = Tile::kWarps;
  static constexpr int kThreads = kWarps * 32, kPitch = kHeadDim + 8;
  static constexpr int kSmemBytes = (2 * kBlockM + 4 * kBlockN) * kPitch * static_cast<int>(sizeof(Element));
  static_assert(kBlockM == 16 * kWarps, "one warp per 16 query rows");
};

// D of one row (rowsum(dO ∘ O)) over the 4 threads t of a quad: thread t adds the 8-column chunks t, t + 4, ... and
// the quad's shuffles give every thread the sum. A row past the sequence gives 0.
template <class Element>
__device__ __forceinline__ float quad_row_dot_do_o(const FlashBwdParams& p, int64_t tok, int h, bool in, int t) {
  float acc = in ? partial_dot_do_o<Element>(p, tok, h, t * 8, 32) : 0.f;
  acc += __shfl_xor_sync(0xffffffffu, acc, 1);
  acc += __shfl_xor_sync(0xffffffffu, acc, 2);
  return acc;
}

// dsum is written here (D of every row of this query block, also rows that see no key: dkdv multiplies it by P = 0
// and a stale value there could be NaN) and read by the dkdv kernel launched after this one.
template <int kHeadDim, class Element, bool kCausal>
__global__ void __launch_bounds__(DqKernelShape<kHeadDim, Element>::kThreads)
    flash_bwd_dq_kernel(const FlashBwdParams p, float* dsum) {
  pdl::grid_begin();
  using Shape = DqKernelShape<kHeadDim, Element>;
  constexpr int kM = Shape::kBlockM, kN = Shape::kBlockN, kThreads = Shape::kThreads, kPitch = Shape::kPitch;
  constexpr float kInf = INFINITY;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Element* sQ = reinterpret_cast<Element*>(smem_raw);
  Element* sdO = sQ + kM * kPitch;
  Element* sK0 = sdO + kM * kPitch;       // [2][kN][kPitch]
  Element* sV0 = sK0 + 2 * kN * kPitch;   // [2][kN][kPitch]

  const int m_block = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z;
  const SeqBounds sb = seq_bounds(p.cu_seqlens_q, p.cu_seqlens_k, b);
  const int m0 = m_block * kM;
  if (m0 >= sb.q_len) return;
  const int hk = h / (p.n_heads_q / p.n_heads_kv);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int d = p.head_dim;
  const int m_rows = min(kM, sb.q_len - m0);
  const int diag = sb.k_len - sb.q_len;
  const int n_end = kCausal ? max(0, min(sb.k_len, m0 + m_rows + diag)) : sb.k_len;
  const int n_blocks = (n_end + kN - 1) / kN;
  const float scale_log2 = p.scale * static_cast<float>(M_LOG2E);
  const int row_lo = m0 + warp * 16 + g;

  float dq[kHeadDim / 8][4];
#pragma unroll
  for (int j = 0; j < kHeadDim / 8; ++j) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.f;

  const Element* k_base =
      static_cast<const Element*>(p.k) + static_cast<int64_t>(sb.k_start) * p.k_row_stride + hk * p.k_head_stride;
  const Element* v_base =
      static_cast<const Element*>(p.v) + static_cast<int64_t>(sb.k_start) * p.v_row_stride + hk * p.v_head_stride;
  auto load_kv = [&](int nb, int buf) {
    const int n0 = nb * kN;
    load_tile_async<kN, kHeadDim, kPitch, kThreads>(sK0 + buf * kN * kPitch,
                                                    k_base + static_cast<int64_t>(n0) * p.k_row_stride,
                                                    p.k_row_stride, sb.k_len - n0, d, tid);
    load_tile_async<kN, kHeadDim, kPitch, kThreads>(sV0 + buf * kN * kPitch,
                                                    v_base + static_cast<int64_t>(n0) * p.v_row_stride,
                                                    p.v_row_stride, sb.k_len - n0, d, tid);
  };

  if (n_blocks > 0) {
    const int64_t row0 = sb.q_start + m0;
    load_tile_async<kM, kHeadDim, kPitch, kThreads>(
        sQ, static_cast<const Element*>(p.q) + row0 * p.q_row_stride + h * p.q_head_stride, p.q_row_stride, m_rows, d,
        tid);
    load_tile_async<kM, kHeadDim, kPitch, kThreads>(
        sdO, static_cast<const Element*>(p.dout) + row0 * p.dout_row_stride + h * p.dout_head_stride,
        p.dout_row_stride, m_rows, d, tid);
    load_kv(0, 0);
    cp_async_commit();
  }
  // The rows' lse and D while the first tiles load; D goes to dsum for the dkdv kernel.
  float lse2[2], drow[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_lo + 8 * r;
    const bool in = row < sb.q_len;
    const float lse = in ? p.lse[h * p.lse_head_stride + sb.q_start + row] : -kInf;
    lse2[r] = lse == -kInf ? kInf : lse * static_cast<float>(M_LOG2E);
    drow[r] = quad_row_dot_do_o<Element>(p, sb.q_start + row, h, in, t);
    if (in && t == 0) dsum[h * static_cast<int64_t>(p.total_q) + sb.q_start + row] = drow[r];
  }
  for (int nb = 0; nb < n_blocks; ++nb) {
    const int buf = nb & 1, n0 = nb * kN;
    if (nb + 1 < n_blocks) {
      load_kv(nb + 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const Element* sK = sK0 + buf * kN * kPitch;
    const Element* sV = sV0 + buf * kN * kPitch;
    float s[kN / 8][4], dp[kN / 8][4];
#pragma unroll
    for (int j = 0; j < kN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.f;
    // S = Q K^T and dP = dO V^T.
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      uint32_t aq[4], ao[4];
      ldmatrix_x4(aq, sQ + (warp * 16 + lane % 16) * kPitch + kk * 16 + (lane / 16) * 8);
      ldmatrix_x4(ao, sdO + (warp * 16 + lane % 16) * kPitch + kk * 16 + (lane / 16) * 8);
#pragma unroll
      for (int nj = 0; nj < kN / 16; ++nj) {
        const int off = (nj * 16 + (lane / 16) * 8 + lane % 8) * kPitch + kk * 16 + ((lane / 8) & 1) * 8;
        uint32_t bk[4], bv[4];
        ldmatrix_x4(bk, sK + off);
        ldmatrix_x4(bv, sV + off);
        mma_16816<Element>(s[2 * nj], aq, bk[0], bk[1]);
        mma_16816<Element>(s[2 * nj + 1], aq, bk[2], bk[3]);
        mma_16816<Element>(dp[2 * nj], ao, bv[0], bv[1]);
        mma_16816<Element>(dp[2 * nj + 1], ao, bv[2], bv[3]);
      }
    }
    // dS = P (dP - D), P = exp(S * scale - lse), zero where masked.
#pragma unroll
    for (int j = 0; j < kN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n0 + 8 * j + 2 * t + (e & 1), r = e >> 1, row = row_lo + 8 * r;
        const bool vis = col < sb.k_len && (!kCausal || col <= row + diag);
        const float prob = vis ? exp2_ftz(fmaf(s[j][e], scale_log2, -lse2[r])) : 0.f;
        dp[j][e] = prob * (dp[j][e] - drow[r]);
      }
    // dQ += dS K.
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      uint32_t a[4];
      acc_to_a_frag<Element>(a, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
      for (int dj = 0; dj < kHeadDim / 16; ++dj) {
        uint32_t bk[4];
        ldmatrix_x4_trans(bk, sK + (kk * 16 + ((lane / 8) & 1) * 8 + lane % 8) * kPitch + dj * 16 + (lane / 16) * 8);
        mma_16816<Element>(dq[2 * dj], a, bk[0], bk[1]);
        mma_16816<Element>(dq[2 * dj + 1], a, bk[2], bk[3]);
      }
    }
    __syncthreads();  // the next prefetch overwrites this buffer
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row_lo + 8 * r;
    if (row >= sb.q_len) continue;
    Element* dst = static_cast<Element*>(p.dq) + static_cast<int64_t>(sb.q_start + row) * p.dq_row_stride +
                   h * p.dq_head_stride;
#pragma unroll
    for (int j = 0; j < kHeadDim / 8; ++j) {
      const int col = 8 * j + 2 * t;
      if (col < d) *reinterpret_cast<uint32_t*>(dst + col) = pack2<Element>(dq[j][2 * r] * p.scale, dq[j][2 * r + 1] * p.scale);
    }
  }
}

}  // namespace vlm::flash
