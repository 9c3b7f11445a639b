// FlashAttention backward for Hopper (sm_90a). Work items are (128-key block, kv head, sequence); a CTA takes one
// (long sequences) or strides over them (persistent, for short sequences: the next item's K, V and first Q, dO load
// while this one's dK, dV are stored, instead of paying a CTA's start and end per item). Warpgroup 0 loads (one
// thread issues the TMA copies of K, V once per item and of Q, dO per query block), and two consumer warpgroups each
// own 64 keys and keep their dK, dV in registers while walking every (q head of the group, kM-query block) that sees
// them (kM = 64 at d=128, 128 at d=64; flash_tiles.h says why). One step:
//   S^T = K Q^T, dP^T = V dO^T            wgmma, both operands from shared memory
//   P^T = exp2(S^T log2e scale - lse),  dS^T = P^T (dP^T - D)      in registers; dS^T also to shared memory
//   dV += P^T dO                          wgmma with the A operand from registers, B N-major
//   -- both warpgroups' dS^T in shared memory (named barrier) --
//   dQ = dS K                             wgmma with A M-major: this warpgroup's 64 x 64 tile of dQ (d=128: 64
//                                         columns; d=64: 64 query rows) over all 128 keys
//   dK += dS^T Q                          issued once dV is done; runs while the dQ tile goes to shared memory and
//                                         one TMA reduce-add adds it into the f32 dq accumulator, asynchronously.
// At d=128 a step's dQ is computed one step later, beside the next step's dV and dK: a warpgroup then needs the
// other's half of dS^T from the step before, written long ago, instead of meeting it every step, and the two take
// turns issuing S^T and dP^T, so one's softmax gradient runs while the other's products keep the tensor cores busy.
// dS^T gets three buffers for it.
// The D row sums and the final dq conversion are the portable kernels of flash_bwd_kernel.cuh.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "core/cuda_check.h"
#include "kernels/cuda/flash/flash_bwd_kernel.cuh"
#include "kernels/cuda/flash/flash_dispatch.h"
#include "kernels/cuda/flash/flash_hopper_host.h"
#include "kernels/cuda/flash/flash_tiles.h"
#include "kernels/cuda/flash/hopper_ptx.cuh"
#include "kernels/cuda/pdl.cuh"

namespace vlm::flash {

namespace {

// Register budget: the launch gives every thread 168 (65536 / 384, rounded down to 8), so the pool is 168 * 384;
// setmaxnreg.inc blocks until the producer's release covers it: 40 * 128 + 232 * 256 must not exceed 168 * 384.
constexpr int kThreads = 384, kProducerRegs = 24, kConsumerRegs = 240, kConsumerWarps = 8;
// Causal rows up to this many keys run persistent (see run_hopper_bwd).
constexpr int kBwdPersistentCausalMaxKeys = 256;
static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 168 * kThreads, "setmaxnreg budget");

template <int kHeadDim>
struct HopperBwdShape {
  using Tile = HopperBwdTile<kHeadDim>;
  static constexpr int kBlockN = Tile::kBlockN, kBlockM = Tile::kBlockM, kStages = Tile::kStages;
  static constexpr int kColBlocks = kHeadDim / 64, kQueryBlocks = kBlockM / 64;
  static constexpr int kKvElems = kBlockN * kHeadDim, kQElems = kBlockM * kHeadDim, kDsElems = kBlockN * kBlockM;
  // dQ (kBlockM x kHeadDim) is split into 64 x 64 tiles, one per consumer warpgroup: by columns at d=128, by query
  // rows at d=64 (kBlockM = 128). Each tile goes out as two 32-column f32 halves.
  static constexpr int kDqElems = 64 * 64;
  // lse and D rows of one step: TMA wants the box's first row 16-byte aligned, so it starts at the multiple of 4 at
  // or below the step's first row and takes 4 rows more.
  // Each stage's rows start 128-byte aligned in shared memory, as TMA destinations must.
  static constexpr int kStatRows = kBlockM + 4, kStatStride = kBlockM + 32;
  static_assert(kColBlocks * kQueryBlocks == 2, "one 64 x 64 dQ tile per consumer warpgroup");
  // d=128 computes each step's dQ one step later (see the kernel), so the two warpgroups need not meet every step;
  // three dS^T buffers keep the slower one's reads clear of the faster one's writes. At d=64 (128-query steps) three
  // buffers of 32 KB do not fit beside the rest, and its steps keep the warpgroups in lockstep.
  static constexpr bool kDeferDq = kHeadDim == 128;
  static constexpr int kDsSlots = kDeferDq ? 3 : 2;
  static constexpr int kSmemBytes = 1024 + 2 * (2 * kKvElems + 2 * kStages * kQElems + kDsSlots * kDsElems) +
                                    4 * 2 * kDqElems + 4 * 2 * kStages * kStatStride + 8 * (2 + 3 * kStages);
  static_assert(kBlockN == 128, "two consumer warpgroups x 64 keys");
  static_assert(kStages == 2, "the lse/D buffers are indexed by iteration parity, like the Q/dO stages");
};

// The 128-byte-swizzle descriptor of the bf16 tile `elems` elements past sK (base16: sK's address / 16).
template <int kLboBytes>
__device__ __forceinline__ uint64_t desc_at(uint32_t base16, int elems) {
  return sm90::desc_sw128_from<kLboBytes>(base16, static_cast<uint32_t>(2 * elems));
}

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

// Accumulator (64 rows x 8*kSteps... columns) to m16n8k16 A fragments, one per 16-column k-step.
template <int kSteps>
__device__ __forceinline__ void pack_frags(uint32_t (&f)[kSteps][4], const float (&acc)[8 * kSteps]) {
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) f[kk][i] = pack2<__nv_bfloat16>(acc[8 * kk + 2 * i], acc[8 * kk + 2 * i + 1]);
}

template <int kHeadDim, bool kCausal>
__global__ void __launch_bounds__(kThreads, 1)
    flash_bwd_sm90_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                          const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do,
                          const __grid_constant__ CUtensorMap tm_dq, const __grid_constant__ CUtensorMap tm_lse,
                          const __grid_constant__ CUtensorMap tm_dsum, const FlashBwdParams p,
                          bool key_block_slowest) {
  pdl::grid_begin();
#if VLM_FLASH_SM90A
  using Shape = HopperBwdShape<kHeadDim>;
  using bf16 = __nv_bfloat16;
  constexpr int kN = Shape::kBlockN, kM = Shape::kBlockM, kStages = Shape::kStages, kCB = Shape::kColBlocks;
  constexpr int kQB = Shape::kQueryBlocks;
  constexpr float kInf = INFINITY;
  extern __shared__ unsigned char smem_raw[];
  bf16* sK = sm90::smem_align1024<bf16>(smem_raw);
  bf16* sV = sK + Shape::kKvElems;
  bf16* sQ = sV + Shape::kKvElems;              // [kStages][kCB][kM][64]
  bf16* sdO = sQ + kStages * Shape::kQElems;    // [kStages][kCB][kM][64]
  bf16* sdS = sdO + kStages * Shape::kQElems;   // [kDsSlots][kM / 64][kN][64]: dS^T, keys x queries, 128B swizzle
  float* sDq = reinterpret_cast<float*>(sdS + Shape::kDsSlots * Shape::kDsElems);  // [2 wg][2 halves][64][32]
  constexpr int kSR = Shape::kStatStride;
  float* sLse = sDq + 2 * Shape::kDqElems;                           // [2][kSR], log2 units
  float* sD = sLse + kStages * kSR;                                   // [2][kSR]
  uint64_t* bars = reinterpret_cast<uint64_t*>(sD + kStages * kSR);
  uint64_t* full_kv = bars;
  uint64_t* empty_kv = bars + 1;
  uint64_t* full_q = bars + 2;
  uint64_t* full_do = full_q + kStages;
  uint64_t* empty = full_do + kStages;

  // Item idx, heaviest key blocks first (under a causal mask the first key blocks are seen by the most queries): with
  // key_block_slowest (persistent causal rows, where the snake schedule balances the costs) the key block is the
  // slowest index; otherwise the fastest, then kv head, then sequence.
  const int heads_batch = p.n_heads_kv * p.batch;
  const int num_nb = (p.max_seqlen_k + kN - 1) / kN, num_items = num_nb * heads_batch;
  const int group = p.n_heads_q / p.n_heads_kv;
  struct Item {
    SeqBounds sb;
    int hk, n0, m_first, m_count, n_iters;
  };
  auto item_at = [&](int idx) {
    Item w;
    const int rem = key_block_slowest ? idx % heads_batch : idx / num_nb;
    w.hk = rem % p.n_heads_kv;
    w.sb = seq_bounds(p.cu_seqlens_q, p.cu_seqlens_k, rem / p.n_heads_kv);
    w.n0 = (key_block_slowest ? idx / heads_batch : idx % num_nb) * kN;
    const int diag = w.sb.k_len - w.sb.q_len;
    w.m_first = kCausal ? max(0, w.n0 - diag) / kM : 0;
    w.m_count = max(0, (w.sb.q_len + kM - 1) / kM - w.m_first);
    w.n_iters = w.n0 < w.sb.k_len ? w.m_count * group : 0;  // 0: nothing to do (no key, or no query sees them)
    return w;
  };
  // wg through a shuffle from lane 0: the compiler then knows it is warp-uniform, and the descriptors computed from it
  // live in uniform registers (as in the forward).
  const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0), lane = tid % 32;

  if (tid == 0) {
    sm90::mbar_init(full_kv, 1);
    sm90::mbar_init(empty_kv, kConsumerWarps);
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
    // Steps are counted over all of this CTA's items (git): they give the Q/dO stage and its parity; items with work
    // (kv) give the K/V buffer's parity.
    for (int r = 0, git = 0, kv = 0;
         warp == 0 && lane == 0 && r * static_cast<int>(gridDim.x) < num_items; ++r) {
      const int idx = snake_index(r, blockIdx.x, gridDim.x);
      if (idx >= num_items) continue;
      const Item w = item_at(idx);
      if (w.n_iters == 0) continue;
      const SeqBounds sb = w.sb;
      const int hk = w.hk, m_first = w.m_first, m_count = w.m_count;
      sm90::mbar_wait(empty_kv, (kv & 1) ^ 1);  // the previous item's last products have read K and V
      ++kv;
      sm90::mbar_arrive_expect_tx(full_kv, 2 * Shape::kKvElems * 2);
#pragma unroll
      for (int c = 0; c < kCB; ++c) {
        sm90::tma_load_3d(sK + c * kN * 64, &tm_k, full_kv, c * 64, hk, sb.k_start + w.n0);
        sm90::tma_load_3d(sV + c * kN * 64, &tm_v, full_kv, c * 64, hk, sb.k_start + w.n0);
      }
      for (int it = 0; it < w.n_iters; ++it, ++git) {
        const int h = hk * group + it / m_count, m0 = (m_first + it % m_count) * kM, s = git % kStages;
        sm90::mbar_wait(&empty[s], ((git / kStages) & 1) ^ 1);
        // Q with this step's lse (log2 units) and D rows; rows past total_q arrive as zeros (masked in the step).
        sm90::mbar_arrive_expect_tx(&full_q[s], Shape::kQElems * 2 + 2 * Shape::kStatRows * 4);
#pragma unroll
        for (int c = 0; c < kCB; ++c)
          sm90::tma_load_3d(sQ + s * Shape::kQElems + c * kM * 64, &tm_q, &full_q[s], c * 64, h, sb.q_start + m0);
        sm90::tma_load_2d(sLse + s * kSR, &tm_lse, &full_q[s], (sb.q_start & ~3) + m0, h);
        sm90::tma_load_2d(sD + s * kSR, &tm_dsum, &full_q[s], (sb.q_start & ~3) + m0, h);
        sm90::mbar_arrive_expect_tx(&full_do[s], Shape::kQElems * 2);
#pragma unroll
        for (int c = 0; c < kCB; ++c)
          sm90::tma_load_3d(sdO + s * Shape::kQElems + c * kM * 64, &tm_do, &full_do[s], c * 64, h, sb.q_start + m0);
      }
    }
  } else {
    sm90::regs_alloc<kConsumerRegs>();
    const int cw = wg - 1, wi = (tid / 32) % 4, g = lane / 4, t = lane % 4;
    const int dq_qb = kQB == 2 ? cw : 0, dq_cb = kCB == 2 ? cw : 0;  // this warpgroup's dQ tile: query / column block
    const float scale_log2 = p.scale * static_cast<float>(M_LOG2E);
    float dk[kHeadDim / 2], dv[kHeadDim / 2];

    constexpr int kOffK = 0, kOffV = Shape::kKvElems, kOffQ = 2 * Shape::kKvElems;
    constexpr int kOffDo = kOffQ + kStages * Shape::kQElems, kOffDs = kOffDo + kStages * Shape::kQElems;
    const uint32_t base16 = sm90::smem_base16(sK);
    // Named barriers: 1 (both dS^T halves written, d=64), 2 + cw (this warpgroup's dQ tile in shared memory), at
    // d=128 kTurnBar + cw (whose turn it is to issue S^T and dP^T) and ready_bar(w, step) (warpgroup w's half of
    // that step's dS^T written; four per warpgroup, so one is never re-armed before its sync: a warpgroup can run
    // at most two steps ahead of the other).
    constexpr int kTurnBar = 4, kReadyBar = 6;
    constexpr bool kTurns = Shape::kDeferDq;
    auto ready_bar = [](int w, int step) { return kReadyBar + 4 * w + (step & 3); };
    // dQ = dS K over the 128 keys of step `step` for this warpgroup's 64 x 64 tile: A = dS (M-major view of dS^T),
    // B = K (N-major).
    auto issue_dq = [&](float (&dq)[32], uint32_t b16, int step) {
      const int ds_off = kOffDs + (static_cast<unsigned>(step) % Shape::kDsSlots) * Shape::kDsElems;
    #pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk)
        sm90::wgmma_m64n64k16_ss_tnsp_ab(dq, desc_at<kN * 128>(b16, ds_off + dq_qb * kN * 64 + kk * 16 * 64),
                                         desc_at<kN * 128>(b16, kOffK + dq_cb * kN * 64 + kk * 16 * 64), kk > 0);
    };
    // The dQ tile to shared memory (two 32-column halves, 128-byte rows, 16-byte chunk c of row r at c ^ (r % 8)),
    // then one thread adds it into dq_accum (query rows m0.. of head h). Rows past this sequence carry exact zeros
    // (P = 0 there), so adding them into the next sequence's rows changes nothing; rows past total_q are dropped by
    // the TMA. Row wi * 16 + g + 8 r (row % 8 = g); columns 8 (j % 4) + 2t, +1 of half j / 4: chunk 2 (j % 4) + t / 2.
    auto store_dq = [&](const float (&dq)[32], const SeqBounds& sb, int h, int m0) {
      float* dq_t = sDq + cw * Shape::kDqElems;
      char* dq_row = reinterpret_cast<char*>(dq_t) + (wi * 16 + g) * 128 + (t % 2) * 8;
      const int x16 = sm90::opaque_u32(((t / 2) ^ g) << 4);  // chunk (2m + t/2) ^ g = 2m ^ ((t/2) ^ g)
    #pragma unroll
      for (int j = 0; j < 8; ++j)
    #pragma unroll
        for (int r = 0; r < 2; ++r)
          *reinterpret_cast<float2*>(dq_row + (j / 4) * 64 * 128 + r * 1024 + (((2 * (j % 4)) << 4) ^ x16)) =
              make_float2(dq[4 * j + 2 * r], dq[4 * j + 2 * r + 1]);
      sm90::fence_proxy_async_smem();
      sm90::named_barrier_sync(2 + cw, 128);
      if (tid % 128 == 0) {
        const int row0 = sb.q_start + m0 + dq_qb * 64;
        sm90::tma_reduce_add_3d(&tm_dq, dq_t, dq_cb * 64, h, row0);
        sm90::tma_reduce_add_3d(&tm_dq, dq_t + 64 * 32, dq_cb * 64 + 32, h, row0);
        sm90::bulk_commit();
      }
    };
    // Turns run over all of the CTA's steps: warpgroup 1 gives warpgroup 0 its first (the other warpgroup arrives
    // at the unused barrier kSoloBar alone, count 128: a select, not a branch, which kept ptxas from serializing
    // every wgmma), and warpgroup 0 takes warpgroup 1's last hand-over after the loop.
    constexpr int kSoloBar = 15;
    if (kTurns) sm90::named_barrier_arrive(cw == 1 ? kTurnBar : kSoloBar, cw == 1 ? 256 : 128);
    for (int r = 0, git = 0, kv = 0; r * static_cast<int>(gridDim.x) < num_items; ++r) {  // the producer's walk
      const int idx = snake_index(r, blockIdx.x, gridDim.x);
      if (idx >= num_items) continue;
      const Item w = item_at(idx);
      if (w.n0 >= w.sb.k_len) continue;  // no key here (keys no query sees still get their zero gradients below)
      const SeqBounds sb = w.sb;
      const int n0 = w.n0, hk = w.hk, m_first = w.m_first, m_count = w.m_count, n_iters = w.n_iters;
      const int diag = sb.k_len - sb.q_len;
      const int key_lo = n0 + cw * 64 + wi * 16 + g;  // this thread's keys: key_lo, key_lo + 8
    #pragma unroll
      for (int i = 0; i < kHeadDim / 2; ++i) dk[i] = dv[i] = 0.f;
      if (n_iters > 0) {  // the producer loads K and V only for items with steps
        sm90::mbar_wait(full_kv, kv & 1);
        ++kv;
      }
      for (int it = 0; it < n_iters; ++it, ++git) {
        const int m0 = (m_first + it % m_count) * kM, s = git % kStages;
        const uint32_t phase = (git / kStages) & 1;
        // Descriptors are built from element offsets to sK (see desc_sw128_from).
        const uint32_t b16 = base16;
        const int q_off = kOffQ + s * Shape::kQElems, do_off = kOffDo + s * Shape::kQElems;
        // lse and D of this thread's queries 8j + 2t, +1 (the stage's rows start at q_start & 3, see kStatRows).
        const float* lse_q = sLse + s * kSR + (sb.q_start & 3) + 2 * t;
        const float* d_q = sD + s * kSR + (sb.q_start & 3) + 2 * t;
        bf16* ds_t = sdS + (static_cast<unsigned>(git) % Shape::kDsSlots) * Shape::kDsElems;

        // S^T = K Q^T and dP^T = V dO^T (64 keys x kM queries per warpgroup).
        float st[kM / 2], dpt[kM / 2];  // overwritten by their first k-step (scale-d 0): no zeroing needed
        sm90::mbar_wait(&full_q[s], phase);
        if (kTurns) sm90::named_barrier_sync(kTurnBar + cw, 256);
        sm90::wgmma_fence();
    #pragma unroll
        for (int kk = 0; kk < kHeadDim / 16; ++kk) {
          const int c = kk / 4, ko = (kk % 4) * 16;
          sm90::wgmma_ss<kM>(st, desc_at<16>(b16, kOffK + c * kN * 64 + cw * 64 * 64 + ko),
                             desc_at<16>(b16, q_off + c * kM * 64 + ko), kk > 0);
        }
        sm90::wgmma_commit();
        sm90::mbar_wait(&full_do[s], phase);
    #pragma unroll
        for (int kk = 0; kk < kHeadDim / 16; ++kk) {
          const int c = kk / 4, ko = (kk % 4) * 16;
          sm90::wgmma_ss<kM>(dpt, desc_at<16>(b16, kOffV + c * kN * 64 + cw * 64 * 64 + ko),
                             desc_at<16>(b16, do_off + c * kM * 64 + ko), kk > 0);
        }
        sm90::wgmma_commit();
        if (kTurns) sm90::named_barrier_arrive(kTurnBar + 1 - cw, 256);  // the other's next turn
        sm90::wgmma_wait<1>();
        sm90::fence_regs(st);
        // P^T (accumulator tile j: queries 8j .. 8j + 7; element e: key + 8 (e >> 1), query + (e & 1)). Masks are
        // evaluated only on tiles that cross the sequence ends or the causal diagonal.
        const bool full_tile = n0 + kN <= sb.k_len && m0 + kM <= sb.q_len && (!kCausal || n0 + kN - 1 <= m0 + diag);
        if (!full_tile) {
    #pragma unroll
          for (int j = 0; j < kM / 8; ++j)
    #pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int qi = 8 * j + 2 * t + (e & 1), key = key_lo + (e >> 1) * 8;
              if (!(key < sb.k_len && m0 + qi < sb.q_len && (!kCausal || key <= m0 + qi + diag))) st[4 * j + e] = -kInf;
            }
        }
    #pragma unroll
        for (int j = 0; j < kM / 8; ++j) {
          const float lse0 = lse_q[8 * j], lse1 = lse_q[8 * j + 1];
    #pragma unroll
          for (int e = 0; e < 4; ++e) {  // masked: exp2(-inf) = 0
            const float x = fmaf(st[4 * j + e], scale_log2, -(e & 1 ? lse1 : lse0));
            // d=64 is the issue-bound case; at d=128 the flush-to-zero form made ptxas spill 44 bytes (0 with exp2f).
            st[4 * j + e] = kHeadDim == 64 ? exp2_ftz(x) : exp2f(x);
          }
        }
        sm90::wgmma_wait<0>();
        sm90::fence_regs(dpt);
    #pragma unroll
        for (int j = 0; j < kM / 8; ++j) {
          const float d0 = d_q[8 * j], d1 = d_q[8 * j + 1];
    #pragma unroll
          for (int e = 0; e < 4; ++e) dpt[4 * j + e] = st[4 * j + e] * (dpt[4 * j + e] - (e & 1 ? d1 : d0));
        }

        uint32_t pf[kM / 16][4], dsf[kM / 16][4];
        pack_frags<kM / 16>(pf, st);
        pack_frags<kM / 16>(dsf, dpt);
        // dS^T to shared memory, [query block][key][64 queries] in the 128-byte swizzle: 16-byte chunk (col / 8) of
        // row r lands at chunk ^ (r % 8).
        // Row key = cw * 64 + wi * 16 + g + 8 r has row % 8 = g; column 8j + 2t is chunk j % 8, byte 4t of it.
        {
          char* ds_row = reinterpret_cast<char*>(ds_t) + (cw * 64 + wi * 16 + g) * 128 + 4 * t;
          const int g16 = sm90::opaque_u32(g << 4);  // keeps the 8 swizzled offsets from being hoisted into registers
    #pragma unroll
          for (int j = 0; j < kM / 8; ++j)
    #pragma unroll
            for (int r = 0; r < 2; ++r)
              *reinterpret_cast<uint32_t*>(ds_row + (j / 8) * kN * 128 + r * 1024 + (((j % 8) << 4) ^ g16)) =
                  dsf[j / 2][(j % 2) * 2 + r];
        }
        // dV += P^T dO (the A fragments are dS^T's own accumulator layout: element pairs (r, j) above).
        sm90::fence_regs(dv);
        sm90::wgmma_fence();
    #pragma unroll
        for (int kk = 0; kk < kM / 16; ++kk)
          wgmma_acc_b_nmajor<kHeadDim>(dv, pf[kk], desc_at<kM * 128>(b16, do_off + kk * 16 * 64));
        sm90::wgmma_commit();

        sm90::fence_proxy_async_smem();
        // The barrier also hands this warpgroup's dQ tile buffer back: its last reduce-add has read it.
        if (tid % 128 == 0) sm90::bulk_wait_read<0>();
        // The step whose dQ is computed now: this one (both halves of its dS^T written: barrier 1), or at d=128 the
        // previous one, whose other half the other warpgroup announced on its ready barrier a while ago.
        bool have_dq = true;
        int dq_it = it, dq_git = git;
        if constexpr (Shape::kDeferDq) {
          sm90::named_barrier_arrive(ready_bar(cw, git), 256);
          have_dq = it > 0;
          dq_it = it - 1;
          dq_git = git + Shape::kDsSlots - 1;  // the slot of step git - 1 (at the first step, an unused one)
          if (have_dq) sm90::named_barrier_sync(ready_bar(1 - cw, git - 1), 256);
        } else {
          sm90::named_barrier_sync(1, 256);
        }

        // Issued even on an item's first step at d=128 (a product of this step's half-written dS^T, never stored):
        // a branch around the wgmma made ptxas spill 400 bytes.
        float dq[32];  // the first k-step overwrites it (scale-d 0), so it needs no zeroing
        sm90::wgmma_fence();
        issue_dq(dq, b16, dq_git);
        sm90::wgmma_commit();
        // dK += dS^T Q (the scale is applied at the end), issued once dV has released the P^T fragments' registers.
        sm90::wgmma_wait<1>();
        sm90::fence_regs(dv);
        sm90::fence_regs(dk);
        sm90::wgmma_fence();
    #pragma unroll
        for (int kk = 0; kk < kM / 16; ++kk)
          wgmma_acc_b_nmajor<kHeadDim>(dk, dsf[kk], desc_at<kM * 128>(b16, q_off + kk * 16 * 64));
        sm90::wgmma_commit();
        sm90::wgmma_wait<1>();
        sm90::fence_regs(dq);
        if (have_dq) store_dq(dq, sb, hk * group + dq_it / m_count, (m_first + dq_it % m_count) * kM);
        sm90::wgmma_wait<0>();
        sm90::fence_regs(dk);
        sm90::fence_regs(dv);
        __syncwarp();
        if (lane == 0) sm90::mbar_arrive(&empty[s]);
      }
      if constexpr (Shape::kDeferDq) {
        if (n_iters > 0) {  // the item's last dQ (it reads K, so it retires before K is released)
          if (tid % 128 == 0) sm90::bulk_wait_read<0>();
          sm90::named_barrier_sync(ready_bar(1 - cw, git - 1), 256);
          float dq[32];
          sm90::wgmma_fence();
          issue_dq(dq, base16, git - 1);
          sm90::wgmma_commit();
          sm90::wgmma_wait<0>();
          sm90::fence_regs(dq);
          store_dq(dq, sb, hk * group + (n_iters - 1) / m_count, (m_first + (n_iters - 1) % m_count) * kM);
        }
      }
      // Every product of this item has retired (wgmma_wait<0> above): K and V may be refilled for the next one.
      __syncwarp();
      if (lane == 0 && n_iters > 0) sm90::mbar_arrive(empty_kv);

      // dK = scale * sum dS^T Q, dV = sum P^T dO. Everything the stores need is recomputed here (the sequence bounds
      // reread), so none of it stays live in registers through the loop.
      const Item e = item_at(static_cast<int>(sm90::opaque_u32(idx)));
      const SeqBounds eb = e.sb;
      const int etid = sm90::opaque_u32(threadIdx.x), elane = etid % 32;
      const int ekey = e.n0 + (etid / 128 - 1) * 64 + ((etid / 32) % 4) * 16 + elane / 4;
    #pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int key = ekey + 8 * r;
        const bool valid = key < eb.k_len;  // the same for the quad; every lane goes on to the shuffles
        const int64_t row = eb.k_start + (valid ? key : 0);
        bf16* dkr = static_cast<bf16*>(p.dk) + row * p.dk_row_stride + e.hk * p.dk_head_stride;
        bf16* dvr = static_cast<bf16*>(p.dv) + row * p.dv_row_stride + e.hk * p.dv_head_stride;
        store_row_pairs<kHeadDim / 8>(
            dkr, [&](int j) { return pack2<bf16>(dk[4 * j + 2 * r] * p.scale, dk[4 * j + 2 * r + 1] * p.scale); },
            valid);
        store_row_pairs<kHeadDim / 8>(
            dvr, [&](int j) { return pack2<bf16>(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]); }, valid);
      }
    }
    if (kTurns) sm90::named_barrier_sync(cw == 0 ? kTurnBar : kSoloBar, cw == 0 ? 256 : 128);
    if (tid % 128 == 0) sm90::bulk_wait<0>();  // the last dQ reduce-adds have landed
  }
#endif
}

template <int kHeadDim>
void run_hopper_bwd(const FlashBwdParams& p, float* dsum, float* dq_accum, cudaStream_t stream) {
  using Shape = HopperBwdShape<kHeadDim>;
  const int64_t rows = static_cast<int64_t>(p.total_q) * p.n_heads_q;
  const int64_t stats_stride = flash_stats_stride(p.total_q);
  float* lse_log2 = dsum + p.n_heads_q * stats_stride;
  pdl::launch(flash_bwd_dot_do_o_kernel<__nv_bfloat16>, static_cast<unsigned>((rows + 31) / 32), 256, 0, stream, p,
              dsum, stats_stride, lse_log2, dq_accum, kHeadDim);  // also zeroes dq_accum
  VLM_CUDA_CHECK_LAUNCH();
  const CUtensorMap tq = make_tensor_map(p.q, p.total_q, p.n_heads_q, kHeadDim, p.q_row_stride, p.q_head_stride,
                                         Shape::kBlockM);
  const CUtensorMap tdo = make_tensor_map(p.dout, p.total_q, p.n_heads_q, kHeadDim, p.dout_row_stride,
                                          p.dout_head_stride, Shape::kBlockM);
  const CUtensorMap tk = make_tensor_map(p.k, p.total_k, p.n_heads_kv, kHeadDim, p.k_row_stride, p.k_head_stride,
                                         Shape::kBlockN);
  const CUtensorMap tv = make_tensor_map(p.v, p.total_k, p.n_heads_kv, kHeadDim, p.v_row_stride, p.v_head_stride,
                                         Shape::kBlockN);
  const int64_t items = static_cast<int64_t>((p.max_seqlen_k + Shape::kBlockN - 1) / Shape::kBlockN) * p.n_heads_kv *
                        p.batch;
  VLM_CHECK(items <= INT32_MAX, "flash: ", items, " backward work items exceed the scheduler's int range");
  // Persistent (one CTA per SM walking the items) for short sequences (2k keys, 256 causal), where an item is a few
  // steps and a CTA's start (barriers, K/V load) and end (dK/dV stores, the last dQ reduce-add) cost as much as its
  // work; one item per CTA otherwise (long causal items differ in cost, and the hardware balances them).
  // Persistent causal items are walked heaviest key block first over all heads and sequences (snake_index): a plain
  // stride hands all heavy items to the same CTAs.
  const bool persistent = flash_persistent(p.max_seqlen_k <= (p.causal ? kBwdPersistentCausalMaxKeys : 2048));
  const dim3 grid(static_cast<unsigned>(persistent ? std::min<int64_t>(items, sm_count()) : items));
  auto kernel = p.causal ? flash_bwd_sm90_kernel<kHeadDim, true> : flash_bwd_sm90_kernel<kHeadDim, false>;
  VLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Shape::kSmemBytes));
  const CUtensorMap tdq = make_f32_reduce_map(dq_accum, p.total_q, p.n_heads_q, kHeadDim, 64);
  const CUtensorMap tlse = make_f32_stats_map(lse_log2, p.total_q, p.n_heads_q, stats_stride, Shape::kStatRows);
  const CUtensorMap tdsum = make_f32_stats_map(dsum, p.total_q, p.n_heads_q, stats_stride, Shape::kStatRows);
  pdl::launch(kernel, grid, kThreads, Shape::kSmemBytes, stream, tq, tk, tv, tdo, tdq, tlse, tdsum, p,
              persistent && p.causal);
  VLM_CUDA_CHECK_LAUNCH();
  launch_convert_dq<__nv_bfloat16>(p, dq_accum, kHeadDim, stream);
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
