// FlashAttention forward for Hopper (sm_90a): TMA bulk tensor copies completing on mbarriers, warp specialization
// (warpgroup 0 loads, the kConsumers others compute; see HopperFwdTile), wgmma with S = Q K^T from shared memory and
// O += P V with P taken from registers, K/V in a 2-stage ring. Online softmax as in the portable kernel (base 2,
// per-row max and sum in registers, quad reductions); exponentials by ex2.approx.ftz, at d=64 a quarter of them by
// a polynomial on the FMA pipes (flash_utils.cuh). Head dims 64 and 128, bf16; anything else takes the portable path.
// Each consumer warpgroup is software-pipelined: step i issues S_i = Q K_i^T together with O += P_{i-1} V_{i-1}, and
// the softmax of S_i runs while that P V product is in flight. The consumer warpgroups take turns issuing (round
// robin on one named barrier each), so the others' softmax overlaps one's GEMMs. A warpgroup whose 64 rows all lie
// past its sequence's end (the last tile of a short sequence) skips the products and only keeps the barriers' count.
// K and V stages are released separately (K after its S GEMM, V after its P V GEMM), so the producer refills K a
// whole step before V.
// The kernel walks (query block, head, sequence) tiles, heaviest query blocks first, persistent: one CTA per SM, the
// producer loading the next tile's Q and K/V while the consumers finish the current one, so a tile's start and end
// (a vision tower's 196-token rows are one or two key blocks) overlap other work. Tiles come from a fixed list per
// CTA, or, for causal rows of more than two query blocks, whose tiles differ in cost, from a global counter (see
// run_hopper_fwd). Short causal d=64 rows (the text model's) take 64-row tiles of one consumer warpgroup instead,
// two CTAs per SM (HopperFwdTile).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <type_traits>

#include "core/cuda_check.h"
#include "kernels/cuda/flash/flash_dispatch.h"
#include "kernels/cuda/flash/flash_hopper_host.h"
#include "kernels/cuda/flash/flash_reduce.h"
#include "kernels/cuda/flash/flash_schedule.h"
#include "kernels/cuda/flash/flash_tiles.h"
#include "kernels/cuda/flash/flash_utils.cuh"
#include "kernels/cuda/flash/hopper_ptx.cuh"
#include "kernels/cuda/pdl.cuh"

namespace vlm::flash {

namespace {

template <int kHeadDim, bool kCausal, bool kWideKeys, int kGroups>
struct HopperFwdShape {
  using Tile = HopperFwdTile<kHeadDim, kCausal, kWideKeys, kGroups>;
  static constexpr int kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN, kStages = Tile::kStages;
  // Mixed key steps (d=128, HopperFwdTile and flash_schedule.h): 128-key steps and wide ones (kBlockN, the stages'
  // capacity); causal rows around the diagonal, non-causal rows so that no step but the first is partial.
  static constexpr bool kMixed = kWideKeys && kHeadDim == 128;
  static constexpr int kNarrowN = kMixed ? 128 : kBlockN;
  static constexpr int kConsumers = Tile::kConsumers, kConsumerWarps = 4 * kConsumers;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  // The launch's register pool (65536 / kThreads per thread) moved to the consumers: 24 * 128 + 240 * 256 = 168 * 384
  // with two; 24 * 128 + 160 * 384 = 126 * 512 with three. Causal kernels give the producer 40, as it also runs the
  // dynamic schedule (it spilled in 24), and their consumers 232 (128-key steps fit without spills). Mixed kernels'
  // consumers need 240 (at 232 ptxas spilled 68 bytes, 216 loaded); their producer spills in 24 instead (ptxas: 84
  // bytes stored, 124 loaded), off the consumers' path: it waits on barriers between its copies.
  // One consumer (64-row tiles, two CTAs per SM, causal): each CTA's half of the pool, (40 + 216) * 128.
  static constexpr int kCtasPerSm = Tile::kCtasPerSm;
  static constexpr int kProducerRegs = kCausal && !kWideKeys ? 40 : 24;
  static constexpr int kConsumerRegs = kConsumers == 1   ? 256 - kProducerRegs
                                       : kConsumers == 2 ? (kCausal && !kWideKeys ? 232 : 240)
                                                         : (kCausal ? 152 : 160);
  static constexpr int kColBlocks = kHeadDim / 64;  // 128-byte swizzle atoms are 64 bf16 wide
  static constexpr int kQElems = kBlockM * kHeadDim, kKvElems = kBlockN * kHeadDim;
  // mbarriers: Q full and empty, K and V full and empty per stage; then the dynamic schedule's two tile slots.
  static constexpr int kSmemBytes = 1024 /* alignment slack */ + 2 * (kQElems + 2 * kStages * kKvElems) +
                                    8 * (2 + 4 * kStages) + 2 * 4;
  static_assert(kBlockM == 64 * kConsumers && kHeadDim % 64 == 0, "consumer warpgroups x 64 rows; 64-wide blocks");
  static_assert(kConsumers >= 1 && kConsumers <= 3, "register split defined for one to three consumers");
  static_assert((kProducerRegs + kConsumerRegs * kConsumers) * 128 <=
                    65536 / kCtasPerSm / kThreads / 8 * 8 * kThreads,
                "register pool");
};

template <int kHeadDim>
__device__ __forceinline__ void wgmma_pv(float (&o)[kHeadDim / 2], const uint32_t (&a)[4], uint64_t desc, int acc);
template <>
__device__ __forceinline__ void wgmma_pv<64>(float (&o)[32], const uint32_t (&a)[4], uint64_t desc, int acc) {
  sm90::wgmma_m64n64k16_rs_tnsp_b(o, a, desc, acc);
}
template <>
__device__ __forceinline__ void wgmma_pv<128>(float (&o)[64], const uint32_t (&a)[4], uint64_t desc, int acc) {
  sm90::wgmma_m64n128k16_rs_tnsp_b(o, a, desc, acc);
}

// O += P V over a W-key step whose V tile starts at shared address v16 (16-byte units, see desc_sw128_from).
template <int kHeadDim, int W, int kMaxSteps>
__device__ __forceinline__ void issue_pv_keys(float (&o)[kHeadDim / 2], const uint32_t (&pf)[kMaxSteps][4],
                                              uint32_t v16) {
#pragma unroll
  for (int kk = 0; kk < W / 16; ++kk)
    wgmma_pv<kHeadDim>(o, pf[kk], sm90::desc_sw128_from<W * 128>(v16, kk * 16 * 64 * 2), 1);
  sm90::wgmma_commit();
}

template <int kHeadDim, bool kCausal, bool kWideKeys, int kGroups>
__global__ void __launch_bounds__(HopperFwdShape<kHeadDim, kCausal, kWideKeys, kGroups>::kThreads,
                                  HopperFwdShape<kHeadDim, kCausal, kWideKeys, kGroups>::kCtasPerSm)
    flash_fwd_sm90_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                          const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_kn,
                          const __grid_constant__ CUtensorMap tm_vn, const FlashFwdParams p,
                          int group_heads, int* tile_counter) {
  pdl::grid_begin();
#if VLM_FLASH_SM90A
  using Shape = HopperFwdShape<kHeadDim, kCausal, kWideKeys, kGroups>;
  using bf16 = __nv_bfloat16;
  constexpr int kM = Shape::kBlockM, kN = Shape::kBlockN, kStages = Shape::kStages, kCB = Shape::kColBlocks;
  constexpr int kWG = Shape::kConsumers, kConsumerWarps = Shape::kConsumerWarps;
  constexpr bool kMixed = Shape::kMixed;
  constexpr int kNn = Shape::kNarrowN;  // the narrow step (kN when not mixed)
  using Wide = std::integral_constant<int, kN>;
  using Narrow = std::integral_constant<int, kNn>;
  // d=64: a quarter of the score exponentials on the FMA pipes (exp2_poly), as the MUFU is the softmax's bottleneck
  // there.
  constexpr bool kPolyExp = kHeadDim == 64;
  constexpr float kInf = INFINITY;
  extern __shared__ unsigned char smem_raw[];
  bf16* sQ = sm90::smem_align1024<bf16>(smem_raw);
  bf16* sK = sQ + Shape::kQElems;            // [kStages][kCB][kN][64]
  bf16* sV = sK + kStages * Shape::kKvElems;  // [kStages][kCB][kN][64]
  uint64_t* bars = reinterpret_cast<uint64_t*>(sV + kStages * Shape::kKvElems);
  uint64_t* bar_q = bars;
  uint64_t* full_k = bars + 1;
  uint64_t* full_v = full_k + kStages;
  uint64_t* empty_k = full_v + kStages;
  uint64_t* empty_v = empty_k + kStages;
  uint64_t* empty_q = empty_v + kStages;
  int* tile_slot = reinterpret_cast<int*>(empty_q + 1);  // [2]
  // With tile_counter (causal kernels only), the producer takes tile indices from a global counter and hands each to
  // the consumers through two slots (tile r in slot r % 2); otherwise every warp walks the CTA's fixed list. Per
  // tile, the producer and every consumer thread meet once on named barrier kSlotBar: the producer has written the
  // slot before it, the consumers read it after, and the producer writes that slot again only after the next
  // meeting, which the consumers reach after reading it. (A hand-over on mbarriers or with named-barrier arrives
  // was correct too, but compute-sanitizer's racecheck does not follow those orders and reported races.)
  const bool dynamic = kCausal && tile_counter != nullptr;
  constexpr int kSlotBar = 1 + kWG, kSlotThreads = 32 + 128 * kWG;

  // Tile idx: (head, sequence) pairs in groups of group_heads (the last group may be smaller); within a group the
  // query block is the slow index, heaviest first (the causal mask), and the pair the fast one. group_heads = 1: one
  // pair's query blocks after another, so CTAs running together share its K and V in L2; group_heads = all pairs:
  // heaviest query blocks first over everything (causal fixed lists, where the snake walk balances the costs);
  // between: the balance of the heaviest-first order with the L2 footprint of a group's K and V (run_hopper_fwd).
  const int heads_batch = p.n_heads_q * p.batch, num_m = (p.max_seqlen_q + kM - 1) / kM;
  const int num_tiles = num_m * heads_batch;
  struct Tile {
    SeqBounds sb;
    int m0, h, hk, diag, n_blocks, n_steps;  // n_blocks: kNn-key blocks; n_steps: key steps (key_step)
    bool valid;
  };
  auto tile_at = [&](int idx) {
    Tile tl;
    const int first = idx / (group_heads * num_m) * group_heads, size = min(group_heads, heads_batch - first);
    const int in_group = idx - first * num_m, rem = first + in_group % size;
    tl.h = rem % p.n_heads_q;
    tl.sb = seq_bounds(p.cu_seqlens_q, p.cu_seqlens_k, rem / p.n_heads_q);
    tl.m0 = (num_m - 1 - in_group / size) * kM;
    tl.valid = tl.m0 < tl.sb.q_len;
    tl.hk = tl.h / (p.n_heads_q / p.n_heads_kv);
    tl.diag = tl.sb.k_len - tl.sb.q_len;
    const int m_rows = min(kM, tl.sb.q_len - tl.m0);
    const int n_end = kCausal ? max(0, min(tl.sb.k_len, tl.m0 + m_rows + tl.diag)) : tl.sb.k_len;
    tl.n_blocks = tl.valid ? (n_end + kNn - 1) / kNn : 0;
    if constexpr (!kMixed) {
      tl.n_steps = tl.n_blocks;
    } else if constexpr (kCausal) {
      tl.n_steps = mixed_steps(tl.n_blocks, tl.diag, kNn);
    } else {
      const int lead = row_mixed_lead(n_end, kNn, kN);
      tl.n_steps = tl.valid ? lead + row_mixed_wide_after(n_end, lead, kNn, kN) : 0;
    }
    return tl;
  };
  // Key steps run from the last key block (the causal diagonal) down: n_blocks steps of kN, or in a mixed kernel the
  // schedule of flash_schedule.h (narrow kNn = 128, wide kN = 160; a non-causal row's from its k_len keys). Returns
  // the step's first key; `wide` says whether it is kN keys or kNn.
  auto key_step = [&](int n_blocks, int diag, int k_len, int i, bool& wide) {
    wide = true;
    if constexpr (!kMixed) return (n_blocks - 1 - i) * kN;
    if constexpr (kCausal) return mixed_key_step(n_blocks, diag, i, kNn, kN, &wide);
    return row_mixed_key_step(k_len, i, kNn, kN, &wide);
  };
  const int tid = threadIdx.x;
  // The warpgroup index through a shuffle from lane 0, so that the compiler knows it is warp-uniform: what is computed
  // from it (the wgmma descriptors of this warpgroup's Q rows) can then live in uniform registers.
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);

  if (tid == 0) {
    sm90::mbar_init(bar_q, 1);
    sm90::mbar_init(empty_q, kConsumerWarps);
    for (int s = 0; s < kStages; ++s) {
      sm90::mbar_init(&full_k[s], 1);
      sm90::mbar_init(&full_v[s], 1);
      sm90::mbar_init(&empty_k[s], kConsumerWarps);
      sm90::mbar_init(&empty_v[s], kConsumerWarps);
    }
    sm90::mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ---- producer: one thread issues every TMA copy.
    sm90::regs_dealloc<Shape::kProducerRegs>();
    if (tid == 0) {
      sm90::tma_prefetch_desc(&tm_q);
      sm90::tma_prefetch_desc(&tm_k);
      sm90::tma_prefetch_desc(&tm_v);
      int it = 0, q_loads = 0;  // key blocks and Q tiles loaded so far: they give the stages and parities
      for (int r = 0; dynamic || r * static_cast<int>(gridDim.x) < num_tiles; ++r) {
        const int idx = producer_work_index(dynamic, tile_counter, tile_slot, r);
        if (!dynamic && idx >= num_tiles) continue;
        Tile tl{};  // n_blocks 0 past the end
        if (idx < num_tiles) tl = tile_at(idx);
        // The slot's hand-over (dynamic): after this tile's Q and first kStages key blocks are on their way, when
        // the consumers have finished the previous tile and freed those stages anyway.
        auto hand_over = [&] {
          if (dynamic) sm90::named_barrier_sync_divergent(kSlotBar, kSlotThreads);
        };
        if (tl.n_blocks > 0) {
          sm90::mbar_wait(empty_q, (q_loads & 1) ^ 1);
          ++q_loads;
          sm90::mbar_arrive_expect_tx(bar_q, Shape::kQElems * 2);
#pragma unroll
          for (int c = 0; c < kCB; ++c)
            sm90::tma_load_3d(sQ + c * kM * 64, &tm_q, bar_q, c * 64, tl.h, tl.sb.q_start + tl.m0);
        }
        for (int i = 0; i < tl.n_steps; ++i, ++it) {
          if (i == kStages) hand_over();
          bool wide;
          const int s = it % kStages, k_row = tl.sb.k_start + key_step(tl.n_blocks, tl.diag, tl.sb.k_len, i, wide);
          // A step of kNn keys (mixed kernels) fills the front of the stage, [kCB][kNn][64], from the narrow maps.
          const int rows = wide ? kN : kNn;
          const CUtensorMap* map_k = wide ? &tm_k : &tm_kn;
          const CUtensorMap* map_v = wide ? &tm_v : &tm_vn;
          const uint32_t phase = (it / kStages) & 1;
          bf16* k_dst = sK + s * Shape::kKvElems;
          bf16* v_dst = sV + s * Shape::kKvElems;
          sm90::mbar_wait(&empty_k[s], phase ^ 1);
          sm90::mbar_arrive_expect_tx(&full_k[s], rows * kHeadDim * 2);
#pragma unroll
          for (int c = 0; c < kCB; ++c)
            sm90::tma_load_3d(k_dst + c * rows * 64, map_k, &full_k[s], c * 64, tl.hk, k_row);
          sm90::mbar_wait(&empty_v[s], phase ^ 1);
          sm90::mbar_arrive_expect_tx(&full_v[s], rows * kHeadDim * 2);
#pragma unroll
          for (int c = 0; c < kCB; ++c)
            sm90::tma_load_3d(v_dst + c * rows * 64, map_v, &full_v[s], c * 64, tl.hk, k_row);
        }
        if (tl.n_steps <= kStages) hand_over();
        if (dynamic && idx >= num_tiles) {
          finish_tile_counter(tile_counter);
          break;
        }
      }
    }
  } else {

    // ---- consumers: warpgroup cw owns query rows [64 cw, 64 cw + 64) of the block.
    sm90::regs_alloc<Shape::kConsumerRegs>();
    const int cw = wg - 1, lane = tid % 32, wi = (tid / 32) % 4, g = lane / 4, t = lane % 4;
    const float scale_log2 = p.scale * static_cast<float>(M_LOG2E);
    float o[kHeadDim / 2];

    // A step's width W (keys) from its score accumulator, float[W / 2] per thread.
  #define VLM_STEP_KEYS(sacc) (2 * static_cast<int>(std::extent_v<std::remove_reference_t<decltype(sacc)>>))
    // S = Q K^T for the key step in `stage`: 64 x W per warpgroup, accumulated over the head dim in k-steps of 16.
    // Descriptors are one add from the 16-byte address of the shared tiles (desc_sw128_from), not rebuilt from
    // pointers before every k-step; with cw known warp-uniform (wg above) they stay in uniform registers, where
    // HGMMA reads them (no R2UR move before each HGMMA).
    const uint32_t smem16 = sm90::smem_base16(sQ);
    auto issue_s = [&](auto& sacc, int stage) {
      constexpr int W = VLM_STEP_KEYS(sacc);
      const uint32_t q16 = smem16 + cw * (64 * 64 * 2 / 16);
      const uint32_t k16 = smem16 + (Shape::kQElems + stage * Shape::kKvElems) * 2 / 16;
  #pragma unroll
      for (int kk = 0; kk < kHeadDim / 16; ++kk) {
        const int c = kk / 4, ko = (kk % 4) * 16;
        const uint64_t da = sm90::desc_sw128_from<16>(q16, (c * kM * 64 + ko) * 2);
        const uint64_t db = sm90::desc_sw128_from<16>(k16, (c * W * 64 + ko) * 2);
        sm90::wgmma_ss<W>(sacc, da, db, kk > 0);
      }
      sm90::wgmma_commit();
    };
    auto v_stage = [&](int stage) {
      return smem16 + (Shape::kQElems + (kStages + stage) * Shape::kKvElems) * 2 / 16;
    };
    auto rescale_o = [&](const float (&corr)[2]) {
  #pragma unroll
      for (int r = 0; r < 2; ++r)
  #pragma unroll
        for (int j = 0; j < kHeadDim / 8; ++j) {
          o[4 * j + 2 * r] *= corr[r];
          o[4 * j + 2 * r + 1] *= corr[r];
        }
    };
    auto release = [&](uint64_t* bar) {
      __syncwarp();
      if (lane == 0) sm90::mbar_arrive(bar);
    };

    // Round robin: warpgroup cw issues after bar.sync(kTurnBar + cw), then hands the turn to the next one with
    // bar.arrive(kTurnBar + next). Per tile, the last warpgroup's arrive lets warpgroup 0 start, and its last
    // hand-over is skipped: each barrier sees as many arrives as syncs, so nothing is left pending at exit.
    constexpr int kTurnBar = 1;
    const int next_turn = kTurnBar + (cw + 1) % kWG;
    const bool last_wg = cw == kWG - 1;
    // Turns: wait for this warpgroup's, pass it on (unless it is the tile's last pass of the last warpgroup), open a
    // tile for warpgroup 0. One consumer warpgroup (64-row tiles) takes no turns.
    auto turn_wait = [&] {
      if constexpr (kWG > 1) sm90::named_barrier_sync(kTurnBar + cw, 256);
    };
    auto turn_pass = [&](bool more_in_tile) {
      if constexpr (kWG > 1) {
        if (!last_wg || more_in_tile) sm90::named_barrier_arrive(next_turn, 256);
      }
    };
    auto turn_open = [&] {
      if constexpr (kWG > 1) {
        if (last_wg) sm90::named_barrier_arrive(kTurnBar, 256);
      }
    };
    int it0 = 0, q_loads = 0;  // as the producer counts: key blocks and Q tiles consumed before this tile
    for (int r = 0; dynamic || r * static_cast<int>(gridDim.x) < num_tiles; ++r) {  // the producer's walk
      if (dynamic) sm90::named_barrier_sync(kSlotBar, kSlotThreads);
      const int idx = consumer_work_index(dynamic, tile_slot, r);
      if (idx >= num_tiles) {
        if (dynamic) break;  // the producer's stop
        continue;
      }
      const Tile tl = tile_at(idx);
      if (!tl.valid) continue;
      const SeqBounds sb = tl.sb;
      const int m0 = tl.m0, h = tl.h, diag = tl.diag, n_blocks = tl.n_blocks, n_steps = tl.n_steps;
      if (m0 + cw * 64 >= sb.q_len) {
        // No row of this warpgroup is in the sequence: the same waits, turns and releases as below, no products.
        // (Waiting for each stage to fill before releasing it keeps the release in the right phase.)
        if (n_steps > 0) {
          sm90::mbar_wait(bar_q, q_loads & 1);
          ++q_loads;
          turn_open();
        }
        for (int i = 0; i < n_steps; ++i) {
          const int s = (it0 + i) % kStages;
          const uint32_t phase = ((it0 + i) / kStages) & 1;
          sm90::mbar_wait(&full_k[s], phase);
          turn_wait();
          turn_pass(i + 1 < n_steps);
          release(&empty_k[s]);
          if (i + 1 == n_steps) release(empty_q);
          sm90::mbar_wait(&full_v[s], phase);
          release(&empty_v[s]);
        }
        it0 += n_steps;
        continue;
      }
      const int row_lo = m0 + cw * 64 + wi * 16 + g;  // this thread's rows: row_lo, row_lo + 8
    #pragma unroll
      for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;
      float row_max[2] = {-kInf, -kInf}, row_sum[2] = {0.f, 0.f};
      if (n_steps > 0) {
        sm90::mbar_wait(bar_q, q_loads & 1);
        ++q_loads;
        turn_open();
      }
      uint32_t pf[kN / 16][4];      // P of the previous key step (bf16, the A operand of its P V GEMM)
      float corr[2] = {1.f, 1.f};   // O's rescale before that P V GEMM
      // Mask (accumulator tile j covers keys n0 + 8j .. 8j + 7; element e: row + 8 (e >> 1), col + (e & 1)), then
      // the online softmax over a step of W keys; O's rescale by corr waits until the previous P V has retired (next
      // step). Tiles j >= dead_from lie wholly past the diagonal (or the keys' end) for every row of this warp:
      // their probabilities are 0 without an exponential (the same values: exp2 of -inf is +0). Only a tile's first
      // step looks for them; the others pass W / 8 and compile without the test.
      auto softmax = [&](auto& sacc, int n0, int dead_from) {
        constexpr int W = VLM_STEP_KEYS(sacc);
        // (A mixed kernel's wide steps lie below the diagonal block, every key visible to every row: no mask.)
        const bool need_mask = !(kMixed && W == kN) &&
                               (n0 + W > sb.k_len || (kCausal && n0 + W - 1 > m0 + cw * 64 + diag));
        if (need_mask) {
    #pragma unroll
          for (int j = 0; j < W / 8; ++j)
    #pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int col = n0 + 8 * j + 2 * t + (e & 1), row = row_lo + (e >> 1) * 8;
              if (col >= sb.k_len || (kCausal && col > row + diag)) sacc[4 * j + e] = -kInf;
            }
        }
    #pragma unroll
        for (int r = 0; r < 2; ++r) {
          // The row's max as a tree (flash_reduce.h) rather than a W / 8-deep chain, except in the d=128 160-key
          // steps, whose consumers are at their register budget (ptxas: the tree's temporaries spilled 12 bytes in
          // the non-causal kernel and 4 more in the mixed one).
          float mx = row_max[r];
          if constexpr (kHeadDim == 128 && W == 160) {
    #pragma unroll
            for (int j = 0; j < W / 8; ++j) mx = fmaxf(mx, fmaxf(sacc[4 * j + 2 * r], sacc[4 * j + 2 * r + 1]));
          } else {
            float pair_max[W / 8];
    #pragma unroll
            for (int j = 0; j < W / 8; ++j) pair_max[j] = fmaxf(sacc[4 * j + 2 * r], sacc[4 * j + 2 * r + 1]);
            mx = fmaxf(mx, tree_max(pair_max));
          }
          mx = quad_max(mx);
          const float m_scaled = mx == -kInf ? 0.f : mx * scale_log2;
          corr[r] = exp2_ftz(row_max[r] * scale_log2 - m_scaled);
          row_max[r] = mx;
          float sum = 0.f;
    #pragma unroll
          for (int j = 0; j < W / 8; ++j) {
            if (j >= dead_from) {  // warp-uniform
              sacc[4 * j + 2 * r] = sacc[4 * j + 2 * r + 1] = 0.f;
              continue;
            }
            const float x0 = fmaf(sacc[4 * j + 2 * r], scale_log2, -m_scaled);
            const float x1 = fmaf(sacc[4 * j + 2 * r + 1], scale_log2, -m_scaled);
            if (kPolyExp && j % 4 == 3) {  // a quarter on the FMA pipes, the rest on the MUFU
              sacc[4 * j + 2 * r] = exp2_poly(x0);
              sacc[4 * j + 2 * r + 1] = exp2_poly(x1);
            } else {
              sacc[4 * j + 2 * r] = exp2_ftz(x0);
              sacc[4 * j + 2 * r + 1] = exp2_ftz(x1);
            }
            sum += sacc[4 * j + 2 * r] + sacc[4 * j + 2 * r + 1];
          }
          row_sum[r] = row_sum[r] * corr[r] + sum;
        }
      };
      // P as the register A operand: k-step kk covers keys 16 kk .. 16 kk + 15 (accumulator tiles 2kk, 2kk + 1).
      auto pack_p = [&](const auto& sacc) {
        constexpr int W = VLM_STEP_KEYS(sacc);
    #pragma unroll
        for (int kk = 0; kk < W / 16; ++kk) {
          pf[kk][0] = pack2<bf16>(sacc[8 * kk + 0], sacc[8 * kk + 1]);
          pf[kk][1] = pack2<bf16>(sacc[8 * kk + 2], sacc[8 * kk + 3]);
          pf[kk][2] = pack2<bf16>(sacc[8 * kk + 4], sacc[8 * kk + 5]);
          pf[kk][3] = pack2<bf16>(sacc[8 * kk + 6], sacc[8 * kk + 7]);
        }
      };
      auto issue_pv = [&](auto wp, int stage) { issue_pv_keys<kHeadDim, decltype(wp)::value>(o, pf, v_stage(stage)); };
      auto stage_of = [&](int i) { return (it0 + i) % kStages; };
      auto phase_of = [&](int i) { return static_cast<uint32_t>(((it0 + i) / kStages) & 1); };
      auto first_key = [&](int i) {
        bool wide;
        return key_step(n_blocks, diag, sb.k_len, i, wide);
      };
      // Step i >= 1 of a tile: S_i over `ws` keys issued with P_{i-1} V_{i-1} over `wp` keys (the previous step's).
      auto step = [&](int i, auto ws, auto wp) {
        constexpr int Ws = decltype(ws)::value;
        const int s = stage_of(i), ps = stage_of(i - 1);
        float sacc[Ws / 2];
    #pragma unroll
        for (int j = 0; j < Ws / 2; ++j) sacc[j] = 0.f;
        // O's rescale (P_{i-2} V_{i-2} retired at the end of step i - 1): at d=128 and in the non-causal d=64
        // kernels while S_i is in the tensor pipe rather than before its issue, a second fence ordering the
        // rescaled registers before the P V products (the d=64 causal kernels lost with it: theirs stays before).
        constexpr bool kRescaleUnderS = kHeadDim == 128 || !kCausal;
        if constexpr (!kRescaleUnderS) rescale_o(corr);
        sm90::mbar_wait(&full_k[s], phase_of(i));
        sm90::mbar_wait(&full_v[ps], phase_of(i - 1));  // here: a wait loop between two wgmmas serializes them
        turn_wait();
        sm90::fence_regs(o);
        sm90::wgmma_fence();
        issue_s(sacc, s);
        if constexpr (kRescaleUnderS) {
          rescale_o(corr);
          sm90::fence_regs(o);
          sm90::wgmma_fence();
        }
        issue_pv(wp, ps);
        turn_pass(i + 1 < n_steps);
        sm90::wgmma_wait<1>();
        sm90::fence_regs(sacc);
        release(&empty_k[s]);
        if (i + 1 == n_steps) release(empty_q);
        softmax(sacc, first_key(i), Ws / 8);
        sm90::wgmma_wait<0>();  // P_{i-1} V_{i-1}: pf and o are free again, V_{i-1}'s stage can be refilled
        sm90::fence_regs(o);
        release(&empty_v[ps]);
        pack_p(sacc);
      };
      // The last step's P V (over `wp` keys) closes the tile.
      auto close = [&](auto wp) {
        const int ls = stage_of(n_steps - 1);
        rescale_o(corr);
        sm90::mbar_wait(&full_v[ls], phase_of(n_steps - 1));
        sm90::fence_regs(o);
        sm90::wgmma_fence();
        issue_pv(wp, ls);
        sm90::wgmma_wait<0>();
        sm90::fence_regs(o);
        release(&empty_v[ls]);
      };
      // Step 0 (the diagonal, kNn keys) has no P V yet; then the steps of each width in runs, each run a uniform loop
      // (no wgmma under a branch, which would make ptxas serialize them), the last P V closing the tile.
      if (n_steps > 0) {
        {
          float sacc[kNn / 2];
    #pragma unroll
          for (int j = 0; j < kNn / 2; ++j) sacc[j] = 0.f;
          sm90::mbar_wait(&full_k[stage_of(0)], phase_of(0));
          turn_wait();
          sm90::wgmma_fence();
          issue_s(sacc, stage_of(0));
          turn_pass(n_steps > 1);
          sm90::wgmma_wait<0>();
          sm90::fence_regs(sacc);
          release(&empty_k[stage_of(0)]);
          if (n_steps == 1) release(empty_q);  // this warpgroup's last read of Q
          // The first accumulator tile past every visible key of this warp's 16 rows (kNn / 8: none).
          const int n0 = first_key(0);
          int dead_from = kNn / 8;
          if (kCausal) {
            int visible = sb.k_len - n0;  // keys of this step before the keys' end
            visible = min(visible, m0 + cw * 64 + wi * 16 + 15 + diag + 1 - n0);
            dead_from = max(0, min(kNn / 8, (visible + 7) / 8));
          }
          softmax(sacc, n0, dead_from);
          pack_p(sacc);
        }
        if constexpr (kMixed && !kCausal) {
          // Steps 1 .. lead - 1 are narrow, the rest wide (row_mixed_key_step); the first wide step multiplies the
          // last narrow P. Loops of zero or one pass take the transition.
          const int lead = row_mixed_lead(sb.k_len, kNn, kN);
          int i = 1;
          for (; i < lead; ++i) step(i, Narrow(), Narrow());
          for (; i < n_steps && i == lead; ++i) step(i, Wide(), Narrow());
          for (; i < n_steps; ++i) step(i, Wide(), Wide());
          const int last_wide = n_steps > lead ? 1 : 0;
          for (int c = 0; c < last_wide; ++c) close(Wide());
          for (int c = last_wide; c < 1; ++c) close(Narrow());
        } else if constexpr (kMixed) {
          // Steps 1 .. 4w are wide, the rest narrow (key_step); the first wide step multiplies the diagonal's P, the
          // first narrow one after them the last wide P. Loops of zero or one pass take the transitions.
          const int wide_steps = 4 * mixed_wide_groups(n_blocks, diag, kNn);
          int i = 1;
          for (; i <= min(1, wide_steps); ++i) step(i, Wide(), Narrow());
          for (; i <= wide_steps; ++i) step(i, Wide(), Wide());
          for (; i < n_steps && i == wide_steps + 1 && wide_steps > 0; ++i) step(i, Narrow(), Wide());
          for (; i < n_steps; ++i) step(i, Narrow(), Narrow());
          const int last_wide = wide_steps > 0 && n_steps - 1 == wide_steps ? 1 : 0;
          for (int c = 0; c < last_wide; ++c) close(Wide());
          for (int c = last_wide; c < 1; ++c) close(Narrow());
        } else {
          for (int i = 1; i < n_steps; ++i) step(i, Wide(), Wide());
          close(Wide());
        }
      }
      it0 += n_steps;

      // Epilogue: normalize, write O and the lse. O's rows go out as 16-byte stores (store_row_pairs), except in
      // the d=128 160-key kernel, whose consumers are at their 240-register budget: there ptxas spilled (12 bytes
      // stored, 44 loaded) with every lane kept on for the quad's shuffles, so it keeps 4-byte stores.
      constexpr bool kQuadStores = !(kHeadDim == 128 && kN == 160 && !kCausal);
    #pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float sum = quad_sum(row_sum[r]);
        const int row = row_lo + 8 * r;
        const bool valid = row < sb.q_len;  // the same for the quad
        if (!kQuadStores && !valid) continue;
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        if (valid && t == 0) {
          const float lse = sum > 0.f ? (row_max[r] * scale_log2 + log2f(sum)) * static_cast<float>(M_LN2) : -kInf;
          p.lse[h * p.lse_head_stride + sb.q_start + row] = lse;
        }
        bf16* orow = static_cast<bf16*>(p.out) + static_cast<int64_t>(sb.q_start + (valid ? row : 0)) *
                     p.out_row_stride + h * p.out_head_stride;
        auto pair_of = [&](int j) { return pack2<bf16>(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv); };
        if constexpr (kQuadStores) {
          store_row_pairs<kHeadDim / 8>(orow, pair_of, valid);  // every lane: the shuffles
        } else {
    #pragma unroll
          for (int j = 0; j < kHeadDim / 8; ++j) *reinterpret_cast<uint32_t*>(orow + 8 * j + 2 * t) = pair_of(j);
        }
      }
    }
  }
#endif
}
#undef VLM_STEP_KEYS

// ---- host side ---------------------------------------------------------------------------------------------------

template <int kHeadDim, bool kCausal, bool kWideKeys, int kGroups = 2>
void run_hopper_fwd(const FlashFwdParams& p, cudaStream_t stream) {
  using Shape = HopperFwdShape<kHeadDim, kCausal, kWideKeys, kGroups>;
  const CUtensorMap tq = make_tensor_map(p.q, p.total_q, p.n_heads_q, kHeadDim, p.q_row_stride, p.q_head_stride,
                                         Shape::kBlockM);
  const CUtensorMap tk = make_tensor_map(p.k, p.total_k, p.n_heads_kv, kHeadDim, p.k_row_stride, p.k_head_stride,
                                         Shape::kBlockN);
  const CUtensorMap tv = make_tensor_map(p.v, p.total_k, p.n_heads_kv, kHeadDim, p.v_row_stride, p.v_head_stride,
                                         Shape::kBlockN);
  // Mixed key steps load their 128-key steps through maps of 128-row boxes (the others never read these).
  const CUtensorMap tkn = Shape::kMixed ? make_tensor_map(p.k, p.total_k, p.n_heads_kv, kHeadDim, p.k_row_stride,
                                                          p.k_head_stride, Shape::kNarrowN)
                                        : tk;
  const CUtensorMap tvn = Shape::kMixed ? make_tensor_map(p.v, p.total_k, p.n_heads_kv, kHeadDim, p.v_row_stride,
                                                          p.v_head_stride, Shape::kNarrowN)
                                        : tv;
  const int64_t tiles = static_cast<int64_t>((p.max_seqlen_q + Shape::kBlockM - 1) / Shape::kBlockM) * p.n_heads_q *
                        p.batch;
  // The dynamic schedule's counter runs one index past the end per CTA.
  const int64_t ctas_max = static_cast<int64_t>(sm_count()) * Shape::kCtasPerSm;  // persistent CTAs
  VLM_CHECK(tiles <= INT32_MAX - ctas_max, "flash: ", tiles, " forward tiles exceed the scheduler's int range");
  // Non-causal tiles cost the same: persistent CTAs walk fixed lists, one (head, sequence) pair's query blocks
  // after another (CTAs running together share its K/V in L2). Causal rows of up to two query blocks (the text
  // model's 177 tokens): fixed lists too, heaviest query block first over all pairs, walked in a snake (snake_index).
  // Longer causal rows (from hopper_fwd_dynamic_min_queries) differ in cost by up to max_seqlen / 128 key blocks, and
  // CTAs striding a fixed list drift apart, so their persistent CTAs take tiles from a global counter, which balances
  // like one tile per CTA and overlaps each tile's start and end with the previous one. The counter walks groups of
  // pairs heaviest query block first, as many pairs as keep the group's K and V within
  // hopper_fwd_causal_group_bytes, so that the tiles handed out last are light ones of several pairs.
  // VLM_FLASH_PERSISTENT=0 launches one CTA per tile; VLM_FLASH_DYNAMIC=0 gives causal rows the former choice (one
  // tile per CTA over 1k keys, fixed lists below), =1 the counter for every causal problem;
  // VLM_FLASH_CAUSAL_GROUP=n sets the pairs per group.
  const int heads_batch = p.n_heads_q * p.batch;
  const bool dynamic =
      kCausal && flash_dynamic(p.max_seqlen_q >= hopper_fwd_dynamic_min_queries) && flash_persistent(true);
  const bool persistent = dynamic || flash_persistent(!(kCausal && p.max_seqlen_q > 1024));
  int group = 1;
  if (dynamic) {
    const int64_t kv_bytes = 2 * static_cast<int64_t>(p.max_seqlen_k) * kHeadDim * 2;
    group = flash_causal_group(
        static_cast<int>(std::clamp<int64_t>(hopper_fwd_causal_group_bytes / kv_bytes, 1, heads_batch)));
  } else if (persistent && kCausal) {
    group = heads_batch;
  }
  group = std::min(group, heads_batch);
  const dim3 grid(static_cast<unsigned>(persistent ? std::min<int64_t>(tiles, ctas_max) : tiles));
  auto kernel = flash_fwd_sm90_kernel<kHeadDim, kCausal, kWideKeys, kGroups>;
  VLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Shape::kSmemBytes));
  if (Shape::kCtasPerSm > 1) {  // shared memory for every CTA an SM is meant to hold, not the L1's default share
    VLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        cudaSharedmemCarveoutMaxShared));
  }
  pdl::launch(kernel, grid, Shape::kThreads, Shape::kSmemBytes, stream, tq, tk, tv, tkn, tvn, p, group,
              dynamic ? flash_tile_counter(stream) : nullptr);
  VLM_CUDA_CHECK_LAUNCH();
}

// The kernel for this problem at one head dim: causal (d=64 rows of at most hopper_fwd_rows64_max_queries queries in
// 64-row tiles, two CTAs per SM; VLM_FLASH_FWD_ROWS64=0/1 forces the choice for every d=64 causal problem; at d=128
// with mixed 128/160-key steps for rows of at least hopper_fwd_causal_wide_min_keys keys; VLM_FLASH_CAUSAL_WIDE=0/1
// forces that choice), or non-causal with wide key steps for long rows (flash_tiles.h; VLM_FLASH_WIDE_KEYS=0/1 forces
// the choice), or non-causal with 128-key steps.
template <int kHeadDim>
void run_hopper_fwd_for(const FlashFwdParams& p, cudaStream_t stream) {
  if constexpr (kHeadDim == 64) {
    if (p.causal && flash_fwd_rows64(p.max_seqlen_q <= hopper_fwd_rows64_max_queries)) {
      run_hopper_fwd<kHeadDim, true, false, 1>(p, stream);
      return;
    }
  }
  if (p.causal) {
    if constexpr (kHeadDim == 128) {
      if (flash_causal_wide(p.max_seqlen_k >= hopper_fwd_causal_wide_min_keys)) {
        run_hopper_fwd<kHeadDim, true, true>(p, stream);
        return;
      }
    }
    run_hopper_fwd<kHeadDim, true, false>(p, stream);
  } else if (flash_wide_keys(p.max_seqlen_k >= hopper_fwd_wide_min_keys(kHeadDim))) {
    run_hopper_fwd<kHeadDim, false, true>(p, stream);
  } else {
    run_hopper_fwd<kHeadDim, false, false>(p, stream);
  }
}

}  // namespace

bool flash_hopper_fwd_supports(const FlashFwdParams& p) {
  return p.dtype == FlashDType::bf16 && (p.head_dim == 64 || p.head_dim == 128) && p.total_q > 0 && p.total_k > 0 &&
         device_is_sm90();
}

Status flash_hopper_fwd(const FlashFwdParams& p, cudaStream_t stream) {
  if (!flash_hopper_fwd_supports(p)) return unsupported("flash: the Hopper forward does not support this problem");
  if (p.batch == 0 || p.max_seqlen_q == 0) return Status();
  if (p.head_dim == 64) {
    run_hopper_fwd_for<64>(p, stream);
  } else {
    run_hopper_fwd_for<128>(p, stream);
  }
  return Status();
}

}  // namespace vlm::flash
