// Device building blocks of the portable (sm_80+) path: cp.async copies, ldmatrix loads, the m16n8k16 tensor-core
// MMA with fp32 accumulation, and register packing. Fragment layouts are the PTX ISA's for mma.m16n8k16:
//   A (16x16, row): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B (16x8, col):  b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g)
//   C (16x8):       c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1)        with g = lane / 4, t = lane % 4.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace vlm::flash {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 2^x on the special-function unit, denormal results flushed to zero. exp2f built without -ftz wraps MUFU.EX2 in
// a range test and two predicated multiplies (three more issue slots per score element, in a softmax that is
// issue-bound at d=64); probabilities under 2^-126 are zero for the bf16 P anyway. exp2_ftz(-inf) = 0.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 2^x without the special-function unit (FMA and integer pipes only), for x <= 0: x is clamped at -127 (so -inf
// gives exactly 0), split as n + f with n = round(x) by the 1.5 * 2^23 trick and |f| <= 1/2, 2^f from a cubic with
// p(0) = 1 (relative error 1.0e-4, under bf16's 2^-9), and n added to the exponent field. The d=64 forward computes
// part of its exponentials here: at d=64 one key block's exponentials take the MUFU (16 per clock per SM) as long
// as its two products take the tensor cores.
__device__ __forceinline__ float exp2_poly(float x) {
  x = fmaxf(x, -127.f);
  const float t = x + 12582912.f;  // the low mantissa bits of t hold round(x)
  const float f = x - (t - 12582912.f);
  const float p = fmaf(fmaf(fmaf(0.0550089031f, f, 0.242210969f), f, 0.693282962f), f, 1.f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}

// 16-byte global -> shared copy; when !pred the 16 bytes are zero-filled and nothing is read.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool pred) {
  const int src_bytes = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Four 8x8 b16 matrices; lane i gives the row address of matrix i / 8, row i % 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}

// d += a * b on one 16x8x16 tile.
template <class Element>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats -> one register of two 16-bit values (lo in the low half, as the MMA fragments expect).
template <class Element>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

template <class Element>
__device__ __forceinline__ float to_float(Element x);
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <>
__device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }

// The A fragment of a 16x16 tile from two adjacent 16x8 accumulator tiles (columns 0..7 and 8..15).
template <class Element>
__device__ __forceinline__ void acc_to_a_frag(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack2<Element>(c0[0], c0[1]);
  a[1] = pack2<Element>(c0[2], c0[3]);
  a[2] = pack2<Element>(c1[0], c1[1]);
  a[3] = pack2<Element>(c1[2], c1[3]);
}

// Reductions over the four lanes of a quad (the lanes that share an accumulator row).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Stores one accumulator row (the mma/wgmma C layout: thread t of a quad holds columns 8j + 2t and 8j + 2t + 1 of
// block j; pair_of(j) packs them) with 16-byte stores: per group of four blocks the quad transposes its pairs (four
// rounds of one shuffle: in round k thread s sends its pair of block (s - k) & 3 and thread t takes the one of
// thread (t + k) & 3), after which thread t holds the 8 contiguous columns of block 4q + t. With 4-byte stores every
// instruction wrote half of each 32-byte sector it touched (ncu: 47% excess sectors in the Hopper epilogues). The
// pairs are packed a group at a time, so only four are live. Every lane of the warp must call it (the shuffles);
// `valid` only gates the stores. dst: the row's column 0, 16-byte aligned (head_dim and the row and head strides
// are multiples of 8 elements).
template <int kBlocks, class Element, class PairOf>
__device__ __forceinline__ void store_row_pairs(Element* dst, PairOf pair_of, bool valid) {
  static_assert(kBlocks % 4 == 0, "groups of four 8-column blocks");
  const int lane = static_cast<int>(threadIdx.x) % 32, t = lane % 4;
#pragma unroll
  for (int q = 0; q < kBlocks / 4; ++q) {
    const uint32_t v[4] = {pair_of(4 * q), pair_of(4 * q + 1), pair_of(4 * q + 2), pair_of(4 * q + 3)};
    uint32_t w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int send_idx = (t - k) & 3, dst_idx = (t + k) & 3;
      uint32_t send = v[0];
      send = send_idx == 1 ? v[1] : send;
      send = send_idx == 2 ? v[2] : send;
      send = send_idx == 3 ? v[3] : send;
      const uint32_t got = __shfl_sync(0xffffffffu, send, (lane & ~3) | dst_idx);
#pragma unroll
      for (int i = 0; i < 4; ++i) w[i] = dst_idx == i ? got : w[i];
    }
    if (valid) *reinterpret_cast<uint4*>(dst + 8 * (4 * q + t)) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// Sequence bounds of batch entry b.
struct SeqBounds {
  int q_start, q_len, k_start, k_len;
};
__device__ __forceinline__ SeqBounds seq_bounds(const int32_t* cu_q, const int32_t* cu_k, int b) {
  SeqBounds s;
  s.q_start = cu_q[b];
  s.q_len = cu_q[b + 1] - s.q_start;
  s.k_start = cu_k[b];
  s.k_len = cu_k[b + 1] - s.k_start;
  return s;
}

// Persistent schedules: the work index CTA `cta` of `ctas` takes in round r. Work lists are ordered heaviest first
// and the stride turns around every round (a snake), so a CTA that took one of a round's heaviest items takes one of
// the next round's lightest. A plain stride (idx += gridDim.x) hands every item of one cost class to the same CTAs
// whenever the grid and the number of classes share a factor (132 SMs and the 2 query blocks of a 177-token causal
// sequence: half the CTAs did twice the work of the other half). With one CTA per item this is just blockIdx.x.
// Walk: for (int r = 0; r * ctas < items; ++r) { idx = snake_index(r, cta, ctas); if (idx >= items) continue; ... }
__device__ __forceinline__ int snake_index(int round, int cta, int ctas) {
  return round * ctas + ((round & 1) ? ctas - 1 - cta : cta);
}

// A persistent CTA's work index for round r, shared by the Hopper forward (tiles) and backward (items). The producer
// takes it from the global counter (dynamic: published in slots[r % 2]; one past the end tells the consumers to stop)
// or walks the CTA's snake; the consumers, after the round's hand-over (dynamic), read what it published.
__device__ __forceinline__ int producer_work_index(bool dynamic, int* counter, int* slots, int round) {
  if (!dynamic) return snake_index(round, blockIdx.x, gridDim.x);
  const int idx = atomicAdd(counter, 1);
  slots[round & 1] = idx;
  return idx;
}
__device__ __forceinline__ int consumer_work_index(bool dynamic, const int* slots, int round) {
  return dynamic ? slots[round & 1] : snake_index(round, blockIdx.x, gridDim.x);
}

// A dynamic schedule's end (flash_tile_counter's pair {next index, CTAs done}): each CTA calls this once, after the
// index past the end, so the last of them leaves the pair at zero for the next launch; the fences order its counter
// updates against the other CTAs'.
__device__ __forceinline__ void finish_tile_counter(int* counter) {
  __threadfence();
  if (atomicAdd(counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
    __threadfence();
    atomicExch(counter, 0);
    atomicExch(counter + 1, 0);
  }
}

// Copies a tile of kRows x kCols (kCols a multiple of 8) from global rows into shared memory with row pitch
// kPitch elements. Rows >= n_rows and columns >= n_cols are zero-filled.
template <int kRows, int kCols, int kPitch, int kThreads, class Element>
__device__ __forceinline__ void load_tile_async(Element* smem, const Element* gmem, int64_t row_stride, int n_rows,
                                                int n_cols, int tid) {
  constexpr int kChunksPerRow = kCols / 8;
  constexpr int kChunks = kRows * kChunksPerRow;
  constexpr int kIters = (kChunks + kThreads - 1) / kThreads;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = tid + it * kThreads;
    if (kChunks % kThreads != 0 && i >= kChunks) break;
    const int r = i / kChunksPerRow, c = (i % kChunksPerRow) * 8;
    const bool pred = r < n_rows && c < n_cols;
    const Element* src = pred ? gmem + r * row_stride + c : gmem;
    cp_async_16(smem + r * kPitch + c, src, pred);
  }
}

}  // namespace vlm::flash
