// Every tile choice of the FlashAttention kernels, in one place, each with its reason. Head dims are compiled for
// 64, 96, 128 and 256; a smaller multiple of 8 runs on the next size up with zero-padded columns.
// Portable path (mma.sync m16n8k16, one warp owns 16 rows of each score tile):
//   forward      kBlockM query rows per CTA (16 per warp), kBlockN keys per step;
//   bwd dk/dv    kBlockN keys per CTA (16 per warp row-group, kSplitD warps share a key group by head-dim halves),
//                kBlockM queries per step;
//   bwd dq       (deterministic mode) kBlockM queries per CTA, kBlockN keys per step.
// Smem rows are padded by 8 elements (16 bytes) so that the 8 rows an ldmatrix reads fall in distinct banks.
#pragma once

namespace vlm::flash {

// The compiled head dim that serves a runtime head dim d (0 when unsupported).
constexpr int padded_head_dim(int d) {
  return d <= 0 || d % 8 != 0 ? 0 : d <= 64 ? 64 : d <= 96 ? 96 : d <= 128 ? 128 : d <= 256 ? 256 : 0;
}

// Per-head stride of the backward's row statistics (D, lse): rows rounded up to 4 floats, as TMA wants 16-byte strides.
constexpr long long flash_stats_stride(long long total_q) { return (total_q + 3) / 4 * 4; }

template <int kHeadDim>
struct FwdTile {
  // 8 warps x 16 rows: K/V tiles are reused by 128 queries; S (32 regs) + O (<= 64 regs) fit without spills.
  static constexpr int kBlockM = 128, kBlockN = 64, kWarps = 8;
};
template <>
struct FwdTile<256> {
  // O alone takes 128 registers per thread at d=256: halve the key step so S stays at 16.
  static constexpr int kBlockM = 128, kBlockN = 32, kWarps = 8;
};

template <int kHeadDim>
struct BwdTile {
  // 4 warps x 16 keys; dK + dV accumulators take <= 128 regs/thread; ~103 KB smem (d=128) lets 2 CTAs share an SM.
  static constexpr int kBlockN = 64, kBlockM = 64, kWarpsN = 4, kSplitD = 1;
};
template <>
struct BwdTile<256> {
  // dK + dV at d=256 need 256 regs/thread with one warp per key group: split the head dim over two warps
  // (S and dP are computed twice), and take 32 queries per step to fit the double-buffered Q/dO in smem.
  static constexpr int kBlockN = 64, kBlockM = 32, kWarpsN = 4, kSplitD = 2;
};

template <int kHeadDim>
struct DqTile {
  // Deterministic dq: like the forward with one more GEMM; 4 warps x 16 queries, double-buffered K/V.
  static constexpr int kBlockM = 64, kBlockN = 64, kWarps = 4;
};
template <>
struct DqTile<256> {
  // dQ (128 regs) at d=256: a narrower key step keeps S and dP at 16 registers each.
  static constexpr int kBlockM = 64, kBlockN = 32, kWarps = 4;
};

}  // namespace vlm::flash

namespace vlm::flash {

// Hopper path (sm_90a): one producer warpgroup (TMA) + consumer warpgroups of 64 query rows each.
template <int kHeadDim, bool kCausal, bool kWideKeys, int kGroups = 2>
struct HopperFwdTile {
  // 128 queries x 128 keys, two consumers: each issues m64n128k16 wgmma chains (S in 64 regs); 2 K/V stages (d=128:
  // 32 KB Q + 2 x 64 KB K/V = 160 KB smem) let the next tile land during this one.
  // Wide key steps, for non-causal rows of at least hopper_fwd_wide_min_keys keys: the per-step costs (barriers, row
  // max and sum, O's rescale) spread over more keys. d=128: 160 keys (S in 80 regs, P in 40, O in 64; 32 KB Q + 2 x
  // 80 KB K/V = 192 KB smem; 176, FA3's choice, spills). d=64: 192 keys (S 96, P 48, O 32 regs; 16 KB Q + 2 x 48 KB
  // K/V). Short rows lose: too few steps to spread the costs over. Causal rows keep 128 (the diagonal's masked work).
  // Causal with kWideKeys (d=128 only, rows of at least hopper_fwd_causal_wide_min_keys keys): mixed key steps,
  // the diagonal's 128 keys, then 160-key steps in fours (4 x 160 = 5 x 128, so none is partial) over the blocks
  // below it, then 128-key steps for the rest (kBlockN = 160 is the stages' capacity): the wide step's per-key gain
  // without its masked work. Only where the mask ends in the diagonal's block (diag a multiple of 128), so wide steps
  // never mask.
  // Non-causal with kWideKeys at d=128: 128-key steps at the top of the row (one to five), then 160-key steps down
  // to key 0, so that no step but the first is partial (flash_schedule.h): a row of only 160-key steps spent up to
  // 128 keys' work on a partial last step.
  static_assert(!(kCausal && kWideKeys) || kHeadDim == 128, "mixed causal key steps at d=128 only");
  // kGroups = 1 (d=64 causal, 128-key steps): 64-query tiles of one consumer warpgroup, two CTAs per SM (the
  // warpgroups of the two CTAs interleave without turns; 8 KB Q + 2 x 32 KB K/V each), as cuDNN's 64x128 forward
  // does: a 177-token row's last tile wastes at most 63 rows of one warpgroup instead of leaving a second warpgroup
  // idle. Only there does it pay (longer rows, non-causal rows and d=128, with one K/V stage, were slower), so only
  // short causal d=64 rows take it (hopper_fwd_rows64_max_queries).
  static_assert(kGroups == 2 || (kGroups == 1 && kHeadDim == 64 && kCausal && !kWideKeys),
                "64-row tiles: d=64 causal, 128-key steps");
  static constexpr int kBlockM = 64 * kGroups, kBlockN = !kWideKeys ? 128 : kHeadDim == 128 ? 160 : 192,
                       kStages = 2, kConsumers = kGroups, kCtasPerSm = kGroups == 1 ? 2 : 1;
};
// Non-causal rows of at least this many keys (max_seqlen_k) take the wide key steps: where they start to pay.
constexpr int hopper_fwd_wide_min_keys(int head_dim) { return head_dim == 128 ? 2048 : 8192; }
// Causal rows of more than this many queries take their tiles from a global counter (run_hopper_fwd); the text
// model's 177-token rows (two query blocks) are faster on the fixed snake lists.
constexpr int hopper_fwd_dynamic_min_queries = 257;
// ... walking groups of (head, sequence) pairs whose K and V fit this many bytes (well inside L2), heaviest query
// block first within a group: one pair at a time leaves the last tiles unbalanced, all pairs at once thrash L2.
constexpr long long hopper_fwd_causal_group_bytes = 8ll << 20;
// Causal d=128 rows of at least this many keys take the mixed 128/160-key steps (HopperFwdTile): on shorter rows the
// per-tile costs of the transitions outweigh the wide steps' gain.
constexpr int hopper_fwd_causal_wide_min_keys = 8192;
// Causal d=64 rows of at most this many queries (max_seqlen_q) take the 64-row tiles (HopperFwdTile, kGroups = 1):
// the text model's 177 tokens gain, 512 and more lose.
constexpr int hopper_fwd_rows64_max_queries = 256;

template <int kHeadDim>
struct HopperBwdTile {
  // 128 keys per CTA (64 per consumer warpgroup: dK + dV take 2 x kHeadDim/2 regs/thread), 64 queries per step so
  // S^T, dP^T (32 regs each) and dQ fit beside them under the 232-register consumer budget; Q/dO double-buffered.
  // (FA3's 80-query steps with dQ^T = K^T dS^T leave no room for the deferred dQ and spill: slower here.)
  static constexpr int kBlockN = 128, kBlockM = 64, kStages = 2;
};
template <>
struct HopperBwdTile<64> {
  // d=64: dK + dV take only 64 regs, so 128 queries per step (S^T, dP^T 64 regs each): S^T and dP^T become
  // m64n128 products (half the shared-memory reads per flop of m64n64) and the per-step barriers pay for twice the work.
  static constexpr int kBlockN = 128, kBlockM = 128, kStages = 2;
};

}  // namespace vlm::flash
