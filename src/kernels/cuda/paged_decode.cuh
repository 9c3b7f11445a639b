// The paged decode attention as a block-level device function, the body of paged_attention.cu's decode kernel: one
// task = (context split, kv head, sequence) of a decode step, every q head of the kv head at once, so each K/V row is
// read once per group.
//
// A lane group of D / 8 lanes (bf16) holds one key row in a 16-byte load per lane, a batch of kDecodeUnroll keys, and
// the next batch's loads are in flight while it computes the current one; each lane group keeps an online softmax per
// q head, and the block merges its lane groups in shared memory. Scores run in the log2 domain (q pre-scaled by
// scale * log2 e). When a step leaves the GPU under-filled (batch 1 with a long context), decode_split() cuts the
// context into splits: each split task writes its normalized partial rows and their log2-sum-exp2, then takes a
// ticket of its (sequence, kv head); the task that takes the last ticket merges all the splits in split order and
// writes the output, so the result is the same bits whichever task finishes last.
//
// Memory ordering of the tickets (the threadFenceReduction pattern): every thread fences its partial writes
// (__threadfence) before the block's ticket atomicAdd; the last task fences again after it and reads the partials
// through L2 (__ldcg; a neighbouring group's last task on the same SM may have cached a shared line in L1). The last
// task resets the ticket to 0; the next call cannot see it earlier, since a kernel reads tickets only after
// pdl::grid_begin(), which waits for the previous grid to complete. Tickets are therefore 0 between calls, and two
// decode calls that split must not run concurrently on one device (one stream per device, as the engine runs).
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace vlm::ops::cuda::paged {

constexpr int kWarps = 4;                     // warps per block of the paged attention kernels
constexpr int kDecodeThreads = kWarps * 32;   // threads of the block that runs a decode task
constexpr int kMaxGroup = 8;                  // q heads per kv head the decode task keeps in registers
constexpr int kDecodeUnroll = 4;              // keys per lane group and batch (two batches in flight)
constexpr int kMinSplitKeys = 64;             // fewest keys a split gets (less would cost more merging than it saves)
constexpr int kSplitAlign = 16;               // split lengths are multiples of this
constexpr int kMaxSplits = 128;               // bound on the partial rows one query may get
constexpr int kMaxTickets = 4096;             // (sequence, kv head) pairs of a split call: < 2 x SMs, see decode_split
constexpr float kLog2e = 1.4426950408889634f;

template <class T>
struct PagedArgs {
  const T* q;                  // [tokens_q, heads_q, dim], rows q_stride elements apart
  const T* k_cache;            // [num_blocks, block_size, heads_kv, dim]
  const T* v_cache;            // same
  const int32_t* block_tables; // [batch, max_blocks]
  const int32_t* context_lens; // [batch]
  const int32_t* cu_q;         // [batch + 1]
  int64_t q_stride;
  int64_t tokens_q;
  int heads_q, heads_kv, dim;
  int block_size, max_blocks, num_blocks;
  int max_q, max_ctx;
  float scale;
};

// Sequence b's query rows [q_begin, q_begin + q_len) and its context length, clamped into what the buffers and the
// bounds allow (the check kernel reports violations; clamping keeps a bad table in bounds) with q_len <= ctx.
struct SeqView {
  int64_t q_begin, q_len, ctx;
  const int32_t* table;
};
template <class T>
__device__ __forceinline__ SeqView seq_view(const PagedArgs<T>& a, int b) {
  const int64_t begin = min(max(static_cast<int64_t>(a.cu_q[b]), int64_t{0}), a.tokens_q);
  const int64_t end = min(max(static_cast<int64_t>(a.cu_q[b + 1]), begin), a.tokens_q);
  const int64_t cap = min(static_cast<int64_t>(a.max_ctx), static_cast<int64_t>(a.max_blocks) * a.block_size);
  const int64_t q_len = min(min(end - begin, static_cast<int64_t>(a.max_q)), cap);
  const int64_t ctx = min(max(static_cast<int64_t>(a.context_lens[b]), q_len), cap);
  return {begin, q_len, ctx, a.block_tables + static_cast<int64_t>(b) * a.max_blocks};
}

// The element offset of (position p, kv head kvh) of a sequence in the cache; block ids clamped into range.
template <class T>
__device__ __forceinline__ int64_t cache_offset(const PagedArgs<T>& a, const int32_t* table, int64_t p, int kvh) {
  const int32_t block = min(max(table[p / a.block_size], 0), a.num_blocks - 1);
  const int64_t slot = static_cast<int64_t>(block) * a.block_size + p % a.block_size;
  return (slot * a.heads_kv + kvh) * a.dim;
}

// Whether the decode task takes the call: one query per sequence, a head dim it is built for, a group it keeps in
// registers and 16-byte aligned rows.
template <class T>
bool decode_applies(const PagedArgs<T>& a) {
  const int group = a.heads_q / a.heads_kv;
  return a.max_q <= 1 && (a.dim == 64 || a.dim == 128) && group <= kMaxGroup &&
         all_aligned16(a.q, a.k_cache, a.v_cache) && (a.q_stride * sizeof(T)) % 16 == 0;
}

// The context splits of a decode step over `sms` multiprocessors: enough tasks for about two waves when batch x kv
// heads leave the GPU idle, each split at least kMinSplitKeys keys and a multiple of kSplitAlign long. splits > 1
// only when batch x heads_kv < 2 x sms (the bound kMaxTickets relies on).
struct DecodeSplit {
  int chunk;   // keys per split
  int splits;  // ceil(max(max_ctx, 1) / chunk), in [1, kMaxSplits]
};
__host__ __device__ inline int64_t split_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
__host__ __device__ inline DecodeSplit decode_split(int64_t batch, int64_t heads_kv, int max_ctx, int sms) {
  const int64_t blocks = batch * heads_kv, target = 2 * static_cast<int64_t>(sms);
  const int64_t ctx = max_ctx > 1 ? max_ctx : 1;
  int64_t n = blocks >= target || blocks <= 0 ? 1 : split_ceil_div(target, blocks);
  const int64_t by_keys = split_ceil_div(ctx, kMinSplitKeys);
  n = n < by_keys ? n : by_keys;
  n = n < 1 ? 1 : (n > kMaxSplits ? kMaxSplits : n);
  const int64_t chunk = split_ceil_div(split_ceil_div(ctx, n), kSplitAlign) * kSplitAlign;
  return {static_cast<int>(chunk), static_cast<int>(split_ceil_div(ctx, chunk))};
}

// The decode task's lanes: a lane group of kLanes lanes holds one key row (kVec elements per lane, one 16-byte load).
template <class T, int kDim>
struct DecodeTraits {
  static constexpr int kVec = kVec16<T>;
  static constexpr int kLanes = kDim / kVec;        // lanes per key row
  static constexpr int kGroups = 32 / kLanes;       // lane groups per warp
  static constexpr int kSlots = kWarps * kGroups;   // lane groups per task, each with its own softmax state
  static_assert(kDim % kVec == 0 && kLanes <= 32 && 32 % kLanes == 0, "a key row spans a power-of-two of lanes");
};

// The shared memory of a decode task (static or dynamic: sizeof(DecodeShared<T, kDim, kGroup>) bytes, at most
// 33 KiB, under the 48 KiB of static shared memory). The lane-group merge and the split combine use it in turn.
template <class T, int kDim, int kGroup>
struct DecodeShared {
  static constexpr int kSlots = DecodeTraits<T, kDim>::kSlots;
  union {
    struct {
      float acc[kSlots][kGroup][kDim];  // each lane group's unnormalized rows
      float m[kSlots][kGroup], l[kSlots][kGroup];
    } merge;
    struct {
      float weight[kGroup][kMaxSplits];  // 2^(lse_s - max) of each split; -1: an empty split
      float inv_total[kGroup];
    } combine;
  };
  unsigned last;  // this task took its group's last ticket
};

namespace detail {

// The last split task of (sequence, kv head kvh) at query row `row`: out = sum over the live splits of
// 2^(lse_s - max) x part_s / the sum of those weights, in split order (empty splits, lse -inf, skipped). Reads the
// other tasks' partials through L2.
template <class T, int kDim, int kGroup>
__device__ void decode_combine(const PagedArgs<T>& a, int group, int kvh, int64_t row, int live, T* out,
                               const float* part_out, const float* part_lse, DecodeShared<T, kDim, kGroup>& sh) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int64_t plane = a.tokens_q * a.heads_q;
  for (int g = warp; g < group; g += warps) {
    const int64_t r = row * a.heads_q + kvh * group + g;
    float mx = -INFINITY;
    for (int sp = lane; sp < live; sp += 32) mx = fmaxf(mx, __ldcg(part_lse + sp * plane + r));
    mx = warp_max(mx);
    float* w = sh.combine.weight[g];
    for (int sp = lane; sp < live; sp += 32) {
      const float lse = __ldcg(part_lse + sp * plane + r);
      w[sp] = lse != -INFINITY ? exp2f(lse - mx) : -1.f;
    }
    __syncwarp();
    if (lane == 0) {
      float total = 0.f;
      for (int sp = 0; sp < live; ++sp)
        if (w[sp] >= 0.f) total += w[sp];
      sh.combine.inv_total[g] = total > 0.f ? 1.f / total : 0.f;
    }
  }
  __syncthreads();
  constexpr int kLoads = 4;  // partial rows in flight per output element
  for (int idx = threadIdx.x; idx < group * kDim; idx += blockDim.x) {
    const int g = idx / kDim, d = idx % kDim;
    const int64_t r = row * a.heads_q + kvh * group + g;
    const float* w = sh.combine.weight[g];
    const float* p = part_out + r * kDim + d;
    float v = 0.f;
    int sp = 0;
    for (; sp + kLoads <= live; sp += kLoads) {
      float x[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) x[u] = __ldcg(p + (sp + u) * plane * kDim);
#pragma unroll
      for (int u = 0; u < kLoads; ++u)
        if (w[sp + u] >= 0.f) v += w[sp + u] * x[u];
    }
    for (; sp < live; ++sp) {
      const float x = __ldcg(p + sp * plane * kDim);
      if (w[sp] >= 0.f) v += w[sp] * x;
    }
    out[r * kDim + d] = from_f32<T>(v * sh.combine.inv_total[g]);
  }
}

}  // namespace detail

// Task (split, kv head kvh, sequence b) of a decode step split into `splits` splits of `chunk` keys (decode_split):
// keys [split * chunk, min((split + 1) * chunk, ctx)) for the q heads of kv head kvh, run by a block of kDecodeThreads
// threads (all of them call it).
//   splits == 1: writes out [tokens_q, heads_q, dim] (part_out, part_lse, tickets unused).
//   splits > 1: writes the split's normalized partial rows part_out [splits, tokens_q, heads_q, dim] and their
//   log2-sum-exp2 part_lse [splits, tokens_q, heads_q] (an empty split, past the context, writes nothing), then takes
//   the ticket tickets[b * heads_kv + kvh] (zero between calls; batch x heads_kv <= kMaxTickets); the task that takes
//   the last one combines every split of the group into out and resets the ticket.
// A sequence with no query in the step returns at once (all its tasks alike, so no ticket is half taken).
template <class T, int kDim, int kGroup>
__device__ void paged_decode_task(const PagedArgs<T>& a, int chunk, int splits, int split, int kvh, int b, T* out,
                                  float* part_out, float* part_lse, unsigned* tickets,
                                  DecodeShared<T, kDim, kGroup>& sh) {
  using Tr = DecodeTraits<T, kDim>;
  constexpr int kVec = Tr::kVec, kLanes = Tr::kLanes, kSlots = Tr::kSlots;
  const int group = a.heads_q / a.heads_kv;
  const SeqView s = seq_view(a, b);
  if (s.q_len == 0) return;  // no query of this sequence in the step (uniform over its tasks)
  const int64_t row = s.q_begin;
  const int64_t k_begin = static_cast<int64_t>(split) * chunk, k_end = min(k_begin + chunk, s.ctx);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = lane % kLanes, slot_id = warp * Tr::kGroups + lane / kLanes;
  if (k_begin < s.ctx) {  // else an empty split (the context bucket exceeds this sequence): nothing to write
    float m[kGroup], l[kGroup], acc[kGroup][kVec];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      m[g] = -INFINITY;
      l[g] = 0.f;
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[g][e] = 0.f;
    }
    float q[kGroup][kVec];
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      if (g >= group) break;
      const T* qg = a.q + row * a.q_stride + static_cast<int64_t>(kvh * group + g) * kDim + part * kVec;
      load_vec16<T>(qg, q[g]);
#pragma unroll
      for (int e = 0; e < kVec; ++e) q[g][e] *= a.scale * kLog2e;
    }
    // The loop runs while the warp's first lane group has keys, so every lane of a warp takes the same iterations
    // (the score shuffles need the whole warp); lane groups past the split's end compute on zeros and drop the
    // result.
    const int64_t warp_first = k_begin + warp * Tr::kGroups, group_offset = slot_id - warp * Tr::kGroups;
    constexpr int64_t kStep = static_cast<int64_t>(kSlots) * kDecodeUnroll;
    // The lane group's keys j0, j0 + kSlots, ... of one iteration; keys past the split stay 0 (computed on, never
    // used).
    auto load_keys = [&](int64_t j0, uint4 (&kr)[kDecodeUnroll], uint4 (&vr)[kDecodeUnroll]) {
#pragma unroll
      for (int u = 0; u < kDecodeUnroll; ++u) {
        const int64_t j = j0 + static_cast<int64_t>(u) * kSlots;
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
        if (j < k_end) {
          const int64_t at = cache_offset(a, s.table, j, kvh) + part * kVec;
          kr[u] = load_raw16(a.k_cache + at);
          vr[u] = load_raw16(a.v_cache + at);
        }
      }
    };
    // Software-pipelined: the next iteration's block-table reads and K/V loads are issued before this iteration's
    // math, so a lane group always has a batch of rows in flight (the sums keep their order: same bits).
    uint4 kr[kDecodeUnroll], vr[kDecodeUnroll], kn[kDecodeUnroll], vn[kDecodeUnroll];
    if (warp_first < k_end) load_keys(warp_first + group_offset, kr, vr);
    for (int64_t w0 = warp_first; w0 < k_end; w0 += kStep) {
      const int64_t j0 = w0 + group_offset;
      const bool more = w0 + kStep < k_end;  // uniform over the warp
      if (more) load_keys(j0 + kStep, kn, vn);
#pragma unroll
      for (int u = 0; u < kDecodeUnroll; ++u) {
        const bool valid = j0 + static_cast<int64_t>(u) * kSlots < k_end;  // uniform over the lane group
        float kf[kVec];
        unpack_vec16<T>(kr[u], kf);
        float dot[kGroup];
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
          if (g >= group) break;
          float d = 0.f;
#pragma unroll
          for (int e = 0; e < kVec; ++e) d += q[g][e] * kf[e];
#pragma unroll
          for (int off = kLanes / 2; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);  // whole warp
          dot[g] = d;
        }
        if (!valid) continue;
        float vf[kVec];
        unpack_vec16<T>(vr[u], vf);
#pragma unroll
        for (int g = 0; g < kGroup; ++g) {
          if (g >= group) break;
          const float m_new = fmaxf(m[g], dot[g]);
          const float corr = exp2f(m[g] - m_new), p = exp2f(dot[g] - m_new);
          l[g] = l[g] * corr + p;
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[g][e] = acc[g][e] * corr + p * vf[e];
          m[g] = m_new;
        }
      }
      if (more) {
#pragma unroll
        for (int u = 0; u < kDecodeUnroll; ++u) {
          kr[u] = kn[u];
          vr[u] = vn[u];
        }
      }
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      if (g >= group) break;
#pragma unroll
      for (int e = 0; e < kVec; ++e) sh.merge.acc[slot_id][g][part * kVec + e] = acc[g][e];
      if (part == 0) {
        sh.merge.m[slot_id][g] = m[g];
        sh.merge.l[slot_id][g] = l[g];
      }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < group * kDim; idx += blockDim.x) {
      const int g = idx / kDim, d = idx % kDim, h = kvh * group + g;
      float mx = -INFINITY;
      for (int sl = 0; sl < kSlots; ++sl) mx = fmaxf(mx, sh.merge.m[sl][g]);
      float sum = 0.f, val = 0.f;
      if (mx != -INFINITY) {
        for (int sl = 0; sl < kSlots; ++sl) {
          const float w = exp2f(sh.merge.m[sl][g] - mx);  // 0 for an empty lane group (m = -inf)
          sum += w * sh.merge.l[sl][g];
          val += w * sh.merge.acc[sl][g][d];
        }
      }
      const int64_t o = (row * a.heads_q + h) * kDim + d;
      if (splits == 1) {
        out[o] = from_f32<T>(val / sum);  // one split covers the whole context, ctx >= 1 key: sum > 0
      } else {
        part_out[static_cast<int64_t>(split) * a.tokens_q * a.heads_q * kDim + o] = sum > 0.f ? val / sum : 0.f;
        if (d == 0)
          part_lse[static_cast<int64_t>(split) * a.tokens_q * a.heads_q + row * a.heads_q + h] =
              sum > 0.f ? mx + log2f(sum) : -INFINITY;
      }
    }
  }
  if (splits == 1) return;
  // Every thread's partial writes reach the device scope before the block takes its ticket.
  __threadfence();
  __syncthreads();  // also: every thread is past its reads of sh.merge (the combine reuses the union)
  unsigned* ticket = tickets + static_cast<int64_t>(b) * a.heads_kv + kvh;
  if (threadIdx.x == 0) {
    const unsigned taken = atomicAdd(ticket, 1u);
    sh.last = taken == static_cast<unsigned>(splits - 1);
    if (sh.last) atomicExch(ticket, 0u);  // every split has counted: ready for the next call
  }
  __syncthreads();
  if (!sh.last) return;
  __threadfence();  // order the partial reads after the ticket
  const SeqView sc = seq_view(a, b);  // read again rather than kept in registers through the key loop
  const int live = static_cast<int>(min(split_ceil_div(sc.ctx, chunk), static_cast<int64_t>(splits)));
  detail::decode_combine<T, kDim, kGroup>(a, group, kvh, sc.q_begin, live, out, part_out, part_lse, sh);
}

}  // namespace vlm::ops::cuda::paged
