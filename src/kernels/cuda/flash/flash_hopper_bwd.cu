// FlashAttention backward for Hopper (sm_90a). One CTA per (128-key block, kv head, sequence): warpgroup 0 loads
// (one thread issues the TMA copies of K, V once and of Q, dO per query block), and two
// consumer warpgroups each own 64 keys and keep their dK, dV in registers while walking every (q head of the group,
// 64-query block) that sees them:
//   S^T = K Q^T, dP^T = V dO^T            wgmma, both operands from shared memory
//   P^T = exp2(S^T log2e scale - lse),  dS^T = P^T (dP^T - D)      in registers
//   dV += P^T dO, dK += dS^T Q            wgmma with the A operand from registers, B N-major
//   dQ += dS K                            dS^T goes to shared memory (128-byte swizzle), wgmma with A M-major;
//                                         the 64 x 64 fp32 tile goes to shared memory and one TMA reduce-add adds
//                                         it into the dq accumulator (d=128: each warpgroup 64 columns; d=64: each
//                                         warpgroup its own 64 keys), asynchronously, while the next step runs.
// The D row sums and the final dq conversion are the portable kernels of flash_bwd_kernel.cuh.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cmath>

#include "core/cuda_check.h"
#include "kernels/cuda/flash/flash_bwd_kernel.cuh"
#include "kernels/cuda/flash/flash_dispatch.h"
#include "kernels/cuda/flash/flash_hopper_host.h"
#include "kernels/cuda/flash/flash_tiles.h"
#include "kernels/cuda/flash/hopper_ptx.cuh"

namespace vlm::flash {

namespace {

// Register budget: the launch gives every thread 168 (65536 / 384, rounded down to 8), so the pool is 168 * 384;
// setmaxnreg.inc blocks until the producer's release covers it: 40 * 128 + 232 * 256 must not exceed 168 * 384.
constexpr int kThreads = 384, kProducerRegs = 40, kConsumerRegs = 232, kConsumerWarps = 8;
static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 168 * kThreads, "setmaxnreg budget");

template <int kHeadDim>
struct HopperBwdShape {
  using Tile = HopperBwdTile<kHeadDim>;
  static constexpr int kBlockN = Tile::kBlockN, kBlockM = Tile::kBlockM, kStages = Tile::kStages;
  static constexpr int kColBlocks = kHeadDim / 64;
  static constexpr int kKvElems = kBlockN * kHeadDim, kQElems = kBlockM * kHeadDim, kDsElems = kBlockN * kBlockM;
  static constexpr int kDqElems = kBlockM * 64;  // one consumer warpgroup's dQ tile, f32: two 32-column halves
  static constexpr int kSmemBytes = 1024 + 2 * (2 * kKvElems + 2 * kStages * kQElems + 2 * kDsElems) +
                                    4 * 2 * kDqElems + 4 * 2 * kStages * kBlockM + 8 * (1 + 3 * kStages);
  static_assert(kBlockN == 128 && kBlockM == 64, "two consumer warpgroups x 64 keys; 64-query steps");
  static_assert(kStages == 2, "the lse/D buffers are indexed by iteration parity, like the Q/dO stages");
};

template <int kHeadDim>
__device__ __forceinline__ void wgmma_acc_b_nmajor(float (&d)[kHeadDim / 2], const uint32_t (&a)[4], uint64_t desc);
template <>
__device__ __forceinline__ void wgmma_acc_b_nmajor<64>(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {
  sm90::wgmma_m64n64k16_rs_tnsp_b(d, a, desc, 1);
}
template <>
__device__ __forceinline__ void wgmma_acc_b_nmajor<128>(float (&d)[64], const uint32_t (&a)[4], uint64_t desc) {
  sm90::wgmma_m64n128k16_rs_tnsp_b(d, a, desc, 1);
}

__device__ __forceinline__ void pack_frags(uint32_t (&f)[4][4], const float (&acc)[32]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) f[kk][i] = pack2<__nv_bfloat16>(acc[8 * kk + 2 * i], acc[8 * kk + 2 * i + 1]);
}

template <int kHeadDim, bool kCausal>
__global__ void __launch_bounds__(kThreads, 1)
    flash_bwd_sm90_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                          const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                          const __grid_constant__ CUtensorMap tm_dq,
                          const FlashBwdParams p, const float* dsum) {
#if VLM_FLASH_SM90A
  using Shape = HopperBwdShape<kHeadDim>;
  using bf16 = __nv_bfloat16;
  constexpr int kN = Shape::kBlockN, kM = Shape::kBlockM, kStages = Shape::kStages, kCB = Shape::kColBlocks;
  constexpr float kInf = INFINITY;
  extern __shared__ unsigned char smem_raw[];
  bf16* sK = reinterpret_cast<bf16*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  bf16* sV = sK + Shape::kKvElems;
  bf16* sQ = sV + Shape::kKvElems;              // [kStages][kCB][kM][64]
  bf16* sdO = sQ + kStages * Shape::kQElems;    // [kStages][kCB][kM][64]
  bf16* sdS = sdO + kStages * Shape::kQElems;   // [2][kN][kM]: dS^T, keys x queries, 128-byte swizzle
  float* sDq = reinterpret_cast<float*>(sdS + 2 * Shape::kDsElems);  // [2 warpgroups][2 halves][kM][32], swizzled
  float* sLse = sDq + 2 * Shape::kDqElems;                           // [2][kM], log2 units
  float* sD = sLse + kStages * kM;                                    // [2][kM]
  uint64_t* bars = reinterpret_cast<uint64_t*>(sD + kStages * kM);
  uint64_t* full_kv = bars;
  uint64_t* full_q = bars + 1;
  uint64_t* full_do = full_q + kStages;
  uint64_t* empty = full_do + kStages;

  const int n_block = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const SeqBounds sb = seq_bounds(p.cu_seqlens_q, p.cu_seqlens_k, b);
  const int n0 = n_block * kN;
  if (n0 >= sb.k_len) return;
  const int group = p.n_heads_q / p.n_heads_kv;
  const int diag = sb.k_len - sb.q_len;
  const int m_first = kCausal ? max(0, n0 - diag) / kM : 0;
  const int m_count = max(0, (sb.q_len + kM - 1) / kM - m_first);
  const int n_iters = m_count * group;
  const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32;

  if (tid == 0) {
    sm90::mbar_init(full_kv, 1);
    for (int s = 0; s < kStages; ++s) {
      sm90::mbar_init(&full_q[s], 1);
      sm90::mbar_init(&full_do[s], 1);
      sm90::mbar_init(&empty[s], kConsumerWarps);
    }
    sm90::mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    sm90::regs_dealloc<kProducerRegs>();
    const int warp = tid / 32;
    if (warp == 0 && lane == 0 && n_iters > 0) {
      sm90::mbar_arrive_expect_tx(full_kv, 2 * Shape::kKvElems * 2);
#pragma unroll
      for (int c = 0; c < kCB; ++c) {
        sm90::tma_load_3d(sK + c * kN * 64, &tm_k, full_kv, c * 64, hk, sb.k_start + n0);
        sm90::tma_load_3d(sV + c * kN * 64, &tm_v, full_kv, c * 64, hk, sb.k_start + n0);
      }
      for (int it = 0; it < n_iters; ++it) {
        const int h = hk * group + it / m_count, m0 = (m_first + it % m_count) * kM, s = it % kStages;
        sm90::mbar_wait(&empty[s], ((it / kStages) & 1) ^ 1);
        sm90::mbar_arrive_expect_tx(&full_q[s], Shape::kQElems * 2);
#pragma unroll
        for (int c = 0; c < kCB; ++c)
          sm90::tma_load_3d(sQ + s * Shape::kQElems + c * kM * 64, &tm_q, &full_q[s], c * 64, h, sb.q_start + m0);
        sm90::mbar_arrive_expect_tx(&full_do[s], Shape::kQElems * 2);
#pragma unroll
        for (int c = 0; c < kCB; ++c)
          sm90::tma_load_3d(sdO + s * Shape::kQElems + c * kM * 64, &tm_do, &full_do[s], c * 64, h, sb.q_start + m0);
      }
    }
  } else {
    sm90::regs_alloc<kConsumerRegs>();
    const int cw = wg - 1, wi = (tid / 32) % 4, g = lane / 4, t = lane % 4;
    const int key_lo = n0 + cw * 64 + wi * 16 + g;  // this thread's keys: key_lo, key_lo + 8
    const float scale_log2 = p.scale * static_cast<float>(M_LOG2E);
    float dk[kHeadDim / 2], dv[kHeadDim / 2];
  #pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) dk[i] = dv[i] = 0.f;

    // lse (log2 units) and D of iteration i go to buffer i & 1, written by the consumers themselves: iteration i's
    // values are staged during iteration i - 1, before the named barrier that also orders the dS^T exchange, so a
    // buffer is rewritten only after both warpgroups have passed the barrier that follows its last reads.
    auto stage_rows = [&](int i) {
      const int ctid = tid - 128;
      if (ctid >= 2 * kM) return;
      const int r = ctid % kM, h = hk * group + i / m_count, row = (m_first + i % m_count) * kM + r;
      const bool in = row < sb.q_len;
      if (ctid >= kM) {
        sD[(i & 1) * kM + r] = in ? dsum[h * static_cast<int64_t>(p.total_q) + sb.q_start + row] : 0.f;
      } else {
        const float lse = in ? p.lse[h * p.lse_head_stride + sb.q_start + row] : -kInf;
        // A row that saw no key (lse = -inf) sees none here either; +inf makes its P exactly 0.
        sLse[(i & 1) * kM + r] = lse == -kInf ? kInf : lse * static_cast<float>(M_LOG2E);
      }
    };
    if (n_iters > 0) {
      stage_rows(0);
      sm90::named_barrier_sync(1, 256);
      sm90::mbar_wait(full_kv, 0);
    }
    for (int it = 0; it < n_iters; ++it) {
      const int h = hk * group + it / m_count, m0 = (m_first + it % m_count) * kM, s = it % kStages;
      const uint32_t phase = (it / kStages) & 1;
      const bf16* q_t = sQ + s * Shape::kQElems;
      const bf16* do_t = sdO + s * Shape::kQElems;
      const float* lse_t = sLse + s * kM;
      const float* d_t = sD + s * kM;
      bf16* ds_t = sdS + (it & 1) * Shape::kDsElems;

      // S^T = K Q^T and dP^T = V dO^T (64 keys x 64 queries per warpgroup).
      float st[32], dpt[32];
  #pragma unroll
      for (int i = 0; i < 32; ++i) st[i] = dpt[i] = 0.f;
      sm90::mbar_wait(&full_q[s], phase);
      sm90::wgmma_fence();
  #pragma unroll
      for (int kk = 0; kk < kHeadDim / 16; ++kk) {
        const int c = kk / 4, ko = (kk % 4) * 16;
        sm90::wgmma_m64n64k16_ss(st, sm90::smem_desc_sw128(sK + c * kN * 64 + cw * 64 * 64 + ko, 16, 1024),
                                 sm90::smem_desc_sw128(q_t + c * kM * 64 + ko, 16, 1024), 1);
      }
      sm90::wgmma_commit();
      sm90::mbar_wait(&full_do[s], phase);
  #pragma unroll
      for (int kk = 0; kk < kHeadDim / 16; ++kk) {
        const int c = kk / 4, ko = (kk % 4) * 16;
        sm90::wgmma_m64n64k16_ss(dpt, sm90::smem_desc_sw128(sV + c * kN * 64 + cw * 64 * 64 + ko, 16, 1024),
                                 sm90::smem_desc_sw128(do_t + c * kM * 64 + ko, 16, 1024), 1);
      }
      sm90::wgmma_commit();
      sm90::wgmma_wait<1>();
      sm90::fence_regs(st);
      // P^T (accumulator tile j: queries 8j .. 8j + 7; element e: key + 8 (e >> 1), query + (e & 1)).
  #pragma unroll
      for (int j = 0; j < 8; ++j)
  #pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qi = 8 * j + 2 * t + (e & 1), key = key_lo + (e >> 1) * 8;
          const bool vis = key < sb.k_len && m0 + qi < sb.q_len && (!kCausal || key <= m0 + qi + diag);
          st[4 * j + e] = vis ? exp2f(fmaf(st[4 * j + e], scale_log2, -lse_t[qi])) : 0.f;
        }
      sm90::wgmma_wait<0>();
      sm90::fence_regs(dpt);
  #pragma unroll
      for (int j = 0; j < 8; ++j)
  #pragma unroll
        for (int e = 0; e < 4; ++e) dpt[4 * j + e] = st[4 * j + e] * (dpt[4 * j + e] - d_t[8 * j + 2 * t + (e & 1)]);

      // dV += P^T dO, dK += dS^T Q (the scale is applied at the end).
      uint32_t pf[4][4], dsf[4][4];
      pack_frags(pf, st);
      pack_frags(dsf, dpt);
      sm90::fence_regs(dk);
      sm90::fence_regs(dv);
      sm90::wgmma_fence();
  #pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_acc_b_nmajor<kHeadDim>(dv, pf[kk], sm90::smem_desc_sw128(do_t + kk * 16 * 64, kM * 128, 1024));
  #pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_acc_b_nmajor<kHeadDim>(dk, dsf[kk], sm90::smem_desc_sw128(q_t + kk * 16 * 64, kM * 128, 1024));
      sm90::wgmma_commit();

      if (it + 1 < n_iters) stage_rows(it + 1);
      // dS^T to shared memory in the 128-byte swizzle: 16-byte chunk (col / 8) of row r lands at chunk ^ (r % 8).
  #pragma unroll
      for (int j = 0; j < 8; ++j)
  #pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = cw * 64 + wi * 16 + g + 8 * r, col = 8 * j + 2 * t;
          const int byte = row * 128 + ((((col >> 3) ^ (row & 7))) << 4) + (col & 7) * 2;
          *reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(ds_t) + byte) =
              pack2<bf16>(dpt[4 * j + 2 * r], dpt[4 * j + 2 * r + 1]);
        }
      sm90::fence_proxy_async_smem();
      // The barrier also hands this warpgroup's dQ tile buffer back: its last reduce-add has read it.
      if (tid % 128 == 0) sm90::bulk_wait_read<0>();
      sm90::named_barrier_sync(1, 256);

      // dQ = dS K over this block's keys: A = dS (M-major view of dS^T), B = K (N-major).
      float dq[32];
  #pragma unroll
      for (int i = 0; i < 32; ++i) dq[i] = 0.f;
      sm90::wgmma_fence();
      constexpr int kKSteps = kHeadDim == 128 ? 8 : 4;  // d=128: all 128 keys, 64 columns; d=64: own keys, all columns
  #pragma unroll
      for (int i = 0; i < kKSteps; ++i) {
        const int kk = kHeadDim == 128 ? i : 4 * cw + i;
        const bf16* k_cols = sK + (kHeadDim == 128 ? cw * kN * 64 : 0);
        sm90::wgmma_m64n64k16_ss_tnsp_ab(dq, sm90::smem_desc_sw128(ds_t + kk * 16 * 64, kN * 128, 1024),
                                         sm90::smem_desc_sw128(k_cols + kk * 16 * 64, kN * 128, 1024), 1);
      }
      sm90::wgmma_commit();
      sm90::wgmma_wait<0>();
      sm90::fence_regs(dq);
      sm90::fence_regs(dk);
      sm90::fence_regs(dv);
      __syncwarp();
      if (lane == 0) sm90::mbar_arrive(&empty[s]);

      // dQ tile to shared memory (two 32-column halves, 128-byte rows, 16-byte chunk c of row r at c ^ (r % 8)),
      // then one thread adds it into dq_accum. Rows past this sequence carry exact zeros (P = 0 there), so adding
      // them into the next sequence's rows changes nothing; rows past total_q are dropped by the TMA.
      float* dq_t = sDq + cw * Shape::kDqElems;
  #pragma unroll
      for (int j = 0; j < 8; ++j)
  #pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = wi * 16 + g + 8 * r, chunk = (2 * (j % 4) + t / 2) ^ (row & 7);
          *reinterpret_cast<float2*>(dq_t + (j / 4) * kM * 32 + row * 32 + chunk * 4 + (t % 2) * 2) =
              make_float2(dq[4 * j + 2 * r], dq[4 * j + 2 * r + 1]);
        }
      sm90::fence_proxy_async_smem();
      sm90::named_barrier_sync(2 + cw, 128);
      if (tid % 128 == 0) {
        const int col0 = kHeadDim == 128 ? cw * 64 : 0;
        sm90::tma_reduce_add_3d(&tm_dq, dq_t, col0, h, sb.q_start + m0);
        sm90::tma_reduce_add_3d(&tm_dq, dq_t + kM * 32, col0 + 32, h, sb.q_start + m0);
        sm90::bulk_commit();
      }
    }
    if (tid % 128 == 0) sm90::bulk_wait<0>();

    // dK = scale * sum dS^T Q, dV = sum P^T dO.
  #pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = key_lo + 8 * r;
      if (key >= sb.k_len) continue;
      bf16* dkr = static_cast<bf16*>(p.dk) + static_cast<int64_t>(sb.k_start + key) * p.dk_row_stride + hk * p.dk_head_stride;
      bf16* dvr = static_cast<bf16*>(p.dv) + static_cast<int64_t>(sb.k_start + key) * p.dv_row_stride + hk * p.dv_head_stride;
  #pragma unroll
      for (int j = 0; j < kHeadDim / 8; ++j) {
        *reinterpret_cast<uint32_t*>(dkr + 8 * j + 2 * t) =
            pack2<bf16>(dk[4 * j + 2 * r] * p.scale, dk[4 * j + 2 * r + 1] * p.scale);
        *reinterpret_cast<uint32_t*>(dvr + 8 * j + 2 * t) = pack2<bf16>(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
      }
    }
  }
#endif
}

template <int kHeadDim>
void run_hopper_bwd(const FlashBwdParams& p, float* dsum, float* dq_accum, cudaStream_t stream) {
  using Shape = HopperBwdShape<kHeadDim>;
  const int64_t rows = static_cast<int64_t>(p.total_q) * p.n_heads_q;
  flash_bwd_dot_do_o_kernel<__nv_bfloat16><<<static_cast<unsigned>((rows + 31) / 32), 256, 0, stream>>>(p, dsum);
  VLM_CUDA_CHECK_LAUNCH();
  VLM_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, static_cast<size_t>(rows) * kHeadDim * sizeof(float), stream));
  const CUtensorMap tq = make_tensor_map(p.q, p.total_q, p.n_heads_q, kHeadDim, p.q_row_stride, p.q_head_stride,
                                         Shape::kBlockM);
  const CUtensorMap tdo = make_tensor_map(p.dout, p.total_q, p.n_heads_q, kHeadDim, p.dout_row_stride,
                                          p.dout_head_stride, Shape::kBlockM);
  const CUtensorMap tk = make_tensor_map(p.k, p.total_k, p.n_heads_kv, kHeadDim, p.k_row_stride, p.k_head_stride,
                                         Shape::kBlockN);
  const CUtensorMap tv = make_tensor_map(p.v, p.total_k, p.n_heads_kv, kHeadDim, p.v_row_stride, p.v_head_stride,
                                         Shape::kBlockN);
  const dim3 grid((p.max_seqlen_k + Shape::kBlockN - 1) / Shape::kBlockN, p.n_heads_kv, p.batch);
  auto kernel = p.causal ? flash_bwd_sm90_kernel<kHeadDim, true> : flash_bwd_sm90_kernel<kHeadDim, false>;
  VLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Shape::kSmemBytes));
  const CUtensorMap tdq = make_f32_reduce_map(dq_accum, p.total_q, p.n_heads_q, kHeadDim, Shape::kBlockM);
  kernel<<<grid, kThreads, Shape::kSmemBytes, stream>>>(tq, tk, tv, tdo, tdq, p, dsum);
  VLM_CUDA_CHECK_LAUNCH();
  const int64_t pairs = rows * (p.head_dim / 2);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((pairs + 255) / 256, 132 * 16));
  flash_bwd_convert_dq_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(p, dq_accum, kHeadDim);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool flash_hopper_bwd_supports(const FlashBwdParams& p) {
  return !p.deterministic && p.dtype == FlashDType::bf16 && (p.head_dim == 64 || p.head_dim == 128) &&
         p.total_q > 0 && p.total_k > 0 && device_is_sm90();
}

Status flash_hopper_bwd(const FlashBwdParams& p, float* dsum, float* dq_accum, cudaStream_t stream) {
  if (!flash_hopper_bwd_supports(p)) return unsupported("flash: the Hopper backward does not support this problem");
  if (p.batch == 0) return Status();
  if (p.head_dim == 64) {
    run_hopper_bwd<64>(p, dsum, dq_accum, stream);
  } else {
    run_hopper_bwd<128>(p, dsum, dq_accum, stream);
  }
  return Status();
}

}  // namespace vlm::flash
