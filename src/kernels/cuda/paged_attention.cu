// The paged KV cache on CUDA (semantics of ops::paged_kv_write and ops::paged_attention).
//
// paged_kv_write: one block per row, 16-byte copies where aligned; a bad slot is recorded and its row skipped.
// paged_attention, by the shape of the call:
//   * decode (every sequence has at most one query, head dim 64 or 128, up to kMaxGroup q heads per kv head,
//     16-byte aligned rows): paged_decode_kernel, one block per (context split, kv head, sequence) running
//     paged_decode_task (paged_decode.cuh). When sequences x kv heads leave the GPU under-filled (batch 1 with a long
//     context) the context is split so that about two waves of blocks run, and the block that finishes a group's
//     splits last merges them (tickets in a per-device buffer): one kernel a call either way.
//   * everything else (chunked prefill, other head dims, larger groups, misaligned views), bf16: the contexts are
//     gathered from the cache into packed K/V (paged_gather_kernel) and attention_forward runs on them, bottom-right
//     causal: our FlashAttention (tensor cores) wherever it applies;
//   * the same in f32: paged_attention_kernel, one warp per (query row, q head) with an online softmax over its
//     visible keys, read through the block table (the fp32 path, compared tightly with the CPU).
// All sums are in a fixed order, so results are bit-reproducible. The index tables are checked by a one-block kernel
// that records the first violation (cuda_context.h); the main kernels clamp what they read so a bad table cannot
// leave the buffers.
#include <algorithm>
#include <array>
#include <atomic>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/paged_decode.cuh"

namespace vlm::ops::cuda {

namespace {

using paged::cache_offset;
using paged::kWarps;
using paged::PagedArgs;
using paged::seq_view;
using paged::SeqView;

constexpr int kMaxSimpleDim = 512;     // head dims of paged_attention_kernel (shared memory: kWarps x 2 x D floats)
constexpr int kCopyThreads = 128;      // threads of a paged_kv_write row
constexpr int kCheckThreads = 256;     // threads of the table check
constexpr int kGatherRows = 16;        // cache rows a block of paged_gather_kernel copies

__global__ void check_paged_tables_kernel(const int32_t* cu, const int32_t* context_lens, const int32_t* tables,
                                          int batch, int64_t tokens_q, int max_q, int max_ctx, int max_blocks,
                                          int block_size, int num_blocks, IndexErrorRecord* rec) {
  pdl::grid_begin();
  const int64_t cap = min(static_cast<int64_t>(max_ctx), static_cast<int64_t>(max_blocks) * block_size);
  for (int b = threadIdx.x; b <= batch; b += blockDim.x) {
    const int64_t c = cu[b];
    bool ok = b == 0 ? c == 0 : (c >= cu[b - 1] && c - cu[b - 1] <= max_q);
    if (b == batch) ok = ok && c == tokens_q;
    if (!ok) record_index_error(rec, IndexErrorOp::paged_cu_seqlens, b, c, tokens_q);
    if (b == batch) continue;
    const int64_t lq = static_cast<int64_t>(cu[b + 1]) - c, len = context_lens[b];
    if (len < lq || len > cap) {
      record_index_error(rec, IndexErrorOp::paged_context_lens, b, len, cap);
      continue;
    }
    for (int64_t j = 0; j < (len + block_size - 1) / block_size; ++j) {
      const int64_t at = static_cast<int64_t>(b) * max_blocks + j;
      const int32_t id = tables[at];
      if (id < 0 || id >= num_blocks) record_index_error(rec, IndexErrorOp::paged_block_tables, at, id, num_blocks);
    }
  }
}

// Row t of k and v into cache slot slots[t] (row = heads_kv * dim elements); kVec: 16-byte copies.
template <class T, bool kVec>
__global__ void paged_kv_write_kernel(T* k_cache, T* v_cache, const T* k, const T* v, int64_t k_stride,
                                      int64_t v_stride, const int32_t* slots, int64_t num_slots, int row,
                                      IndexErrorRecord* rec) {
  pdl::grid_begin();
  const int64_t t = blockIdx.x, s = slots[t];
  if (s == -1) return;
  if (s < -1 || s >= num_slots) {
    if (threadIdx.x == 0) record_index_error(rec, IndexErrorOp::paged_kv_slots, t, s, num_slots);
    return;
  }
  T* dk = k_cache + s * row;
  T* dv = v_cache + s * row;
  const T* sk = k + t * k_stride;
  const T* sv = v + t * v_stride;
  if constexpr (kVec) {
    for (int i = threadIdx.x * kVec16<T>; i < row; i += blockDim.x * kVec16<T>) {
      *reinterpret_cast<uint4*>(dk + i) = load_raw16(sk + i);
      *reinterpret_cast<uint4*>(dv + i) = load_raw16(sv + i);
    }
  } else {
    for (int i = threadIdx.x; i < row; i += blockDim.x) {
      dk[i] = sk[i];
      dv[i] = sv[i];
    }
  }
}

// One warp per (query row i of sequence z, q head y): online softmax over keys 0 .. i + ctx - q_len.
template <class T>
__global__ void paged_attention_kernel(PagedArgs<T> a, T* out) {
  pdl::grid_begin();
  extern __shared__ float smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.z, h = blockIdx.y, kvh = h / (a.heads_q / a.heads_kv), dim = a.dim;
  const SeqView s = seq_view(a, b);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (i >= s.q_len) return;
  float* qs = smem + warp * 2 * dim;  // each lane touches only its own d (d = lane mod 32): no syncs needed
  float* acc = qs + dim;
  const int64_t row = s.q_begin + i;
  for (int d = lane; d < dim; d += 32) {
    qs[d] = to_f32(a.q[row * a.q_stride + static_cast<int64_t>(h) * dim + d]);
    acc[d] = 0.f;
  }
  const int64_t n = i + s.ctx - s.q_len + 1;
  float m = -INFINITY, l = 0.f;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t at = cache_offset(a, s.table, j, kvh);
    const T* kj = a.k_cache + at;
    float dot = 0.f;
    for (int d = lane; d < dim; d += 32) dot += qs[d] * to_f32(kj[d]);
    const float sc = a.scale * warp_sum(dot);
    const float m_new = fmaxf(m, sc);
    const float corr = expf(m - m_new), p = expf(sc - m_new);
    l = l * corr + p;
    const T* vj = a.v_cache + at;
    for (int d = lane; d < dim; d += 32) acc[d] = acc[d] * corr + p * to_f32(vj[d]);
    m = m_new;
  }
  const float inv_l = 1.f / l;  // n >= 1: q_len <= ctx
  T* o = out + (row * a.heads_q + h) * dim;
  for (int d = lane; d < dim; d += 32) o[d] = from_f32<T>(acc[d] * inv_l);
}

// cu_k[0] = 0, cu_k[b + 1] = cu_k[b] + the (clamped) context length of sequence b: the packed offsets of the K/V rows
// paged_gather_kernel writes; cu_q_safe = cu_seqlens_q made monotone, within [0, tokens_q] and with lengths <= max_q
// (equal to it when it passed the check), so that attention_forward cannot leave q or out on a bad table either.
// One thread: the batch of one step is small.
template <class T>
__global__ void paged_context_offsets_kernel(PagedArgs<T> a, int batch, int32_t* cu_k, int32_t* cu_q_safe) {
  pdl::grid_begin();
  if (threadIdx.x != 0) return;
  int64_t offset = 0, q_end = 0;
  cu_k[0] = 0;
  cu_q_safe[0] = 0;
  for (int b = 0; b < batch; ++b) {
    offset += seq_view(a, b).ctx;
    cu_k[b + 1] = static_cast<int32_t>(offset);
    q_end = min(min(max(static_cast<int64_t>(a.cu_q[b + 1]), q_end), q_end + a.max_q), a.tokens_q);
    cu_q_safe[b + 1] = static_cast<int32_t>(q_end);
  }
}

// Block (x, sequence y) copies K/V rows of positions [x * kGatherRows, ...) of the sequence's context from the cache
// into the packed k, v [batch * max_ctx, heads_kv, dim] at cu_k[y] + position, and zeroes the rows past the packed
// contexts: its positions ctx .. max_ctx - 1 take rows cu_k[batch] + y * max_ctx - cu_k[y] + (position - ctx). The
// attention kernels read whole tiles, past a sequence's last row: those rows weigh zero but must be finite, since
// 0 x NaN from stale scratch memory would poison the output. kVec: 16-byte copies.
template <class T, bool kVec>
__global__ void paged_gather_kernel(PagedArgs<T> a, const int32_t* cu_k, T* k, T* v) {
  pdl::grid_begin();
  const SeqView s = seq_view(a, blockIdx.y);
  const int64_t p0 = static_cast<int64_t>(blockIdx.x) * kGatherRows;
  const int64_t rows = min(int64_t{kGatherRows}, static_cast<int64_t>(a.max_ctx) - p0);
  if (rows <= 0) return;
  constexpr int kStep = kVec ? kVec16<T> : 1;
  const int64_t row = static_cast<int64_t>(a.heads_kv) * a.dim, per_row = row / kStep;
  const int64_t base = cu_k[blockIdx.y];
  const int64_t pad_base = cu_k[gridDim.y] + static_cast<int64_t>(blockIdx.y) * a.max_ctx - base - s.ctx;
  for (int64_t i = threadIdx.x; i < rows * per_row; i += blockDim.x) {
    const int64_t p = p0 + i / per_row, c = (i % per_row) * kStep;
    if (p >= s.ctx) {
      const int64_t dst = (pad_base + p) * row + c;
      if constexpr (kVec) {
        *reinterpret_cast<uint4*>(k + dst) = uint4{0, 0, 0, 0};
        *reinterpret_cast<uint4*>(v + dst) = uint4{0, 0, 0, 0};
      } else {
        k[dst] = from_f32<T>(0.f);
        v[dst] = from_f32<T>(0.f);
      }
      continue;
    }
    const int64_t src = cache_offset(a, s.table, p, 0) + c, dst = (base + p) * row + c;
    if constexpr (kVec) {
      *reinterpret_cast<uint4*>(k + dst) = load_raw16(a.k_cache + src);
      *reinterpret_cast<uint4*>(v + dst) = load_raw16(a.v_cache + src);
    } else {
      k[dst] = a.k_cache[src];
      v[dst] = a.v_cache[src];
    }
  }
}

// The ticket counters of paged_decode_task, per device: device memory initialized to zero when the module loads
// (the threadFenceReduction sample's retirement counter), so nothing is allocated or set per call, nor ever inside a
// graph capture; every call leaves them zero.
__device__ unsigned g_decode_tickets[paged::kMaxTickets] = {};

// g_decode_tickets of `device` (its address asked once per device).
unsigned* decode_tickets(Device device) {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<unsigned*>, kMaxDevices> cached{};
  VLM_CHECK(device.index >= 0 && device.index < kMaxDevices, "paged decode: device index ", device.index,
            " out of range");
  std::atomic<unsigned*>& slot = cached[static_cast<size_t>(device.index)];
  unsigned* p = slot.load(std::memory_order_acquire);
  if (p == nullptr) {
    DeviceGuard guard(device);
    void* address = nullptr;
    VLM_CUDA_CHECK(cudaGetSymbolAddress(&address, g_decode_tickets));
    p = static_cast<unsigned*>(address);
    slot.store(p, std::memory_order_release);
  }
  return p;
}

// Block (split x, kv head y, sequence z) of a decode step: paged_decode_task (paged_decode.cuh). The explicit 1 block
// per SM of the launch bounds lets ptxas keep its register choice of the split-free kernel (without it, the group-4
// instantiations were held to 128 registers and spilled around the combine).
template <class T, int kDim, int kGroup>
__global__ void __launch_bounds__(paged::kDecodeThreads, 1)
    paged_decode_kernel(PagedArgs<T> a, int chunk, int splits, T* out, float* part_out, float* part_lse,
                        unsigned* tickets) {
  pdl::grid_begin();
  static_assert(sizeof(paged::DecodeShared<T, kDim, kGroup>) <= 48 * 1024, "static shared memory");
  __shared__ paged::DecodeShared<T, kDim, kGroup> sh;
  paged::paged_decode_task<T, kDim, kGroup>(a, chunk, splits, static_cast<int>(blockIdx.x),
                                            static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z), out, part_out,
                                            part_lse, tickets, sh);
}

// One kernel a call: with splits > 1 the partial rows go to scratch and each group's last split block merges them.
template <class T, int kDim, int kGroup>
void launch_decode(const PagedArgs<T>& a, T* out, int64_t batch, Device dev, cudaStream_t stream) {
  const paged::DecodeSplit split = paged::decode_split(batch, a.heads_kv, a.max_ctx, multiprocessors(dev.index));
  const dim3 grid(static_cast<unsigned>(split.splits), static_cast<unsigned>(a.heads_kv),
                  static_cast<unsigned>(batch));
  Tensor part_out, part_lse;
  unsigned* tickets = nullptr;
  if (split.splits > 1) {
    VLM_CHECK(batch * a.heads_kv <= paged::kMaxTickets, "ops::paged_attention: ", batch, " sequences x ", a.heads_kv,
              " kv heads split their contexts but exceed the ", paged::kMaxTickets, " decode tickets");
    part_out = scratch(Shape{split.splits, a.tokens_q, a.heads_q, kDim}, DType::f32, dev);
    part_lse = scratch(Shape{split.splits, a.tokens_q, a.heads_q}, DType::f32, dev);
    tickets = decode_tickets(dev);
  }
  pdl::launch(paged_decode_kernel<T, kDim, kGroup>, grid, paged::kDecodeThreads, 0, stream, a, split.chunk,
              split.splits, out, ptr_or_null<float>(part_out), ptr_or_null<float>(part_lse), tickets);
  VLM_CUDA_CHECK_LAUNCH();
}

// The decode kernel's instantiations: head dim 64 or 128 x the group bound 1, 3 (SmolLM2's 9 / 3), 4 or kMaxGroup.
template <class T, int kDim>
void launch_decode_for_group(const PagedArgs<T>& a, T* out, int64_t batch, Device dev, cudaStream_t stream) {
  const int group = a.heads_q / a.heads_kv;
  if (group == 1) return launch_decode<T, kDim, 1>(a, out, batch, dev, stream);
  if (group == 3) return launch_decode<T, kDim, 3>(a, out, batch, dev, stream);
  if (group <= 4) return launch_decode<T, kDim, 4>(a, out, batch, dev, stream);
  launch_decode<T, kDim, paged::kMaxGroup>(a, out, batch, dev, stream);
}
template <class T>
void launch_decode_for_dim(const PagedArgs<T>& a, T* out, int64_t batch, Device dev, cudaStream_t stream) {
  if (a.dim == 64) return launch_decode_for_group<T, 64>(a, out, batch, dev, stream);
  launch_decode_for_group<T, 128>(a, out, batch, dev, stream);
}

// Prefill in bf16 on tensor cores: each sequence's context gathered from the cache into packed K/V (at most
// batch x max_context_len rows; the copy is small next to the attention), then attention_forward, bottom-right
// causal (FlashAttention wherever it applies; its simple kernel otherwise).
void gather_prefill(Tensor& out, const Tensor& q, const PagedArgs<bf16>& a, int64_t batch, Device dev,
                    cudaStream_t stream) {
  const int64_t rows = batch * a.max_ctx;
  VLM_CHECK(rows <= INT32_MAX, "ops::paged_attention: ", batch, " sequences x max_context_len ", a.max_ctx,
            " exceed 32-bit row offsets");
  Tensor k = scratch(Shape{rows, a.heads_kv, a.dim}, DType::bf16, dev);
  Tensor v = scratch(Shape{rows, a.heads_kv, a.dim}, DType::bf16, dev);
  Tensor cu_k = scratch(Shape{batch + 1}, DType::i32, dev), cu_q_safe = scratch(Shape{batch + 1}, DType::i32, dev);
  pdl::launch(paged_context_offsets_kernel<bf16>, 1, 32, 0, stream, a, static_cast<int>(batch), ptr<int32_t>(cu_k),
              ptr<int32_t>(cu_q_safe));
  VLM_CUDA_CHECK_LAUNCH();
  const int64_t row = static_cast<int64_t>(a.heads_kv) * a.dim;
  const bool vec = row % kVec16<bf16> == 0 && all_aligned16(a.k_cache, a.v_cache, ptr<bf16>(k), ptr<bf16>(v));
  const dim3 grid(static_cast<unsigned>(ceil_div(a.max_ctx, kGatherRows)), static_cast<unsigned>(batch));
  auto kernel = vec ? paged_gather_kernel<bf16, true> : paged_gather_kernel<bf16, false>;
  pdl::launch(kernel, grid, kCopyThreads, 0, stream, a, ptr<int32_t>(cu_k), ptr<bf16>(k), ptr<bf16>(v));
  VLM_CUDA_CHECK_LAUNCH();
  Tensor lse = scratch(Shape{a.heads_q, a.tokens_q}, DType::f32, dev);
  // cu_k ends at the sum of the context lengths, below the rows allocated: the caller-vouched form of the check.
  attention_forward(out, lse, q, k, v, cu_q_safe, cu_k, a.max_q, a.max_ctx, a.scale, /*causal=*/true,
                    /*cu_seqlens_checked=*/true);
}

}  // namespace

void paged_kv_write(Tensor& k_cache, Tensor& v_cache, const Tensor& k, const Tensor& v, const Tensor& slot_mapping) {
  const Device dev = k_cache.device();
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_of(dev);
  const int64_t tokens = k.dim(0), row = k.dim(1) * k.dim(2);
  if (tokens == 0) return;
  VLM_CHECK(tokens <= (int64_t{1} << 31) - 1, "ops::paged_kv_write: ", tokens, " rows exceed the CUDA grid");
  const int64_t num_slots = k_cache.dim(0) * k_cache.dim(1);
  dispatch_float(k.dtype(), "paged_kv_write", [&](auto tag) {
    using T = decltype(tag);
    const int64_t ks = k.strides()[0], vs = v.strides()[0];
    const bool vec = row % kVec16<T> == 0 && ks % kVec16<T> == 0 && vs % kVec16<T> == 0 &&
                     all_aligned16(ptr<T>(k), ptr<T>(v), ptr<T>(k_cache), ptr<T>(v_cache));
    auto kernel = vec ? paged_kv_write_kernel<T, true> : paged_kv_write_kernel<T, false>;
    pdl::launch(kernel, static_cast<unsigned>(tokens), kCopyThreads, 0, stream, ptr<T>(k_cache), ptr<T>(v_cache),
                ptr<T>(k), ptr<T>(v), ks, vs, ptr<int32_t>(slot_mapping), num_slots, static_cast<int>(row),
                index_error_record(dev));
  });
  VLM_CUDA_CHECK_LAUNCH();
  check_index_errors_now("paged_kv_write", dev);
}

void paged_attention(Tensor& out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const Tensor& block_tables, const Tensor& context_lens, const Tensor& cu_seqlens_q,
                     int max_seqlen_q, int max_context_len, float scale, bool indices_checked) {
  const Device dev = out.device();
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_of(dev);
  const int64_t batch = cu_seqlens_q.dim(0) - 1;
  VLM_CHECK(batch <= 65535 && k_cache.dim(2) <= 65535 && q.dim(1) <= 65535, "ops::paged_attention: ", batch,
            " sequences x ", q.dim(1), " heads exceed the CUDA grid");
  VLM_CHECK(k_cache.dim(0) <= INT32_MAX && k_cache.dim(1) <= INT32_MAX && block_tables.dim(1) <= INT32_MAX,
            "ops::paged_attention: the cache or block table is too large for 32-bit block ids");
  if (batch > 0 && !indices_checked) {
    pdl::launch(check_paged_tables_kernel, 1, kCheckThreads, 0, stream, ptr<int32_t>(cu_seqlens_q),
                ptr<int32_t>(context_lens), ptr<int32_t>(block_tables), static_cast<int>(batch), q.dim(0),
                max_seqlen_q, max_context_len, static_cast<int>(block_tables.dim(1)),
                static_cast<int>(k_cache.dim(1)), static_cast<int>(k_cache.dim(0)), index_error_record(dev));
    VLM_CUDA_CHECK_LAUNCH();
  }
  check_index_errors_now("paged_attention", dev);
  if (q.dim(0) == 0 || batch == 0 || k_cache.dim(0) == 0) return;
  const int64_t dim = q.dim(2);
  dispatch_float(q.dtype(), "paged_attention", [&](auto tag) {
    using T = decltype(tag);
    PagedArgs<T> a{};
    a.q = ptr<T>(q);
    a.k_cache = ptr<T>(k_cache);
    a.v_cache = ptr<T>(v_cache);
    a.block_tables = ptr<int32_t>(block_tables);
    a.context_lens = ptr<int32_t>(context_lens);
    a.cu_q = ptr<int32_t>(cu_seqlens_q);
    a.q_stride = q.strides()[0];
    a.tokens_q = q.dim(0);
    a.heads_q = static_cast<int>(q.dim(1));
    a.heads_kv = static_cast<int>(k_cache.dim(2));
    a.dim = static_cast<int>(dim);
    a.block_size = static_cast<int>(k_cache.dim(1));
    a.max_blocks = static_cast<int>(block_tables.dim(1));
    a.num_blocks = static_cast<int>(k_cache.dim(0));
    a.max_q = max_seqlen_q;
    a.max_ctx = max_context_len;
    a.scale = scale;
    if (paged::decode_applies(a)) {
      launch_decode_for_dim<T>(a, ptr<T>(out), batch, dev, stream);
      return;
    }
    if (max_seqlen_q == 0) return;
    if constexpr (std::is_same_v<T, bf16>) {
      if (max_context_len > 0) return gather_prefill(out, q, a, batch, dev, stream);
    }
    VLM_CHECK(dim <= kMaxSimpleDim, "ops::paged_attention: head dim ", dim, " exceeds the kernel's ", kMaxSimpleDim);
    const dim3 grid(static_cast<unsigned>(ceil_div(max_seqlen_q, kWarps)), static_cast<unsigned>(a.heads_q),
                    static_cast<unsigned>(batch));
    const size_t smem = sizeof(float) * kWarps * 2 * static_cast<size_t>(dim);
    pdl::launch(paged_attention_kernel<T>, grid, kWarps * 32, smem, stream, a, ptr<T>(out));
    VLM_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace vlm::ops::cuda
