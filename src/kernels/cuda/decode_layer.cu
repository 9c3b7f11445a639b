// ops::decoder_layer_decode on CUDA: a decoder layer of a small-batch decode step as one persistent kernel.
//
// At batch 1 a 135M model's layer is five dependent kernels of a few microseconds each (the QKV GEMV, the paged
// attention, the output projection, the gate/up GEMV, the down projection), and each costs more in launch, ramp and
// drain than in arithmetic. Here one cooperative grid of a block or two per SM runs the five as phases separated by
// grid-wide barriers, and before it waits at a barrier each block starts the weight rows of its next phase towards
// L2 (they depend on nothing the phase writes), so the weights stream while the slowest block finishes.
//
// The phases run the GEMV's and the decode attention's own device code (gemv_device.cuh, paged_decode.cuh) with the
// persistent grid in place of each kernel's grid: every output column and every attention task computes exactly what
// the separate kernels compute, so the results are the unfused CUDA path's bits. The attention's split combine is done
// by each group's last split task (tickets), inside the attention phase.
//
// The barrier: a monotone arrival counter in device memory; the k-th barrier of a launch waits for k x gridDim.x
// arrivals (thread 0 fences the block's writes, arrives, spins with acquire loads, fences again). The last block to
// leave resets the counters, so they are zero between launches (stream order: the next launch starts after this one
// ends). One fused layer runs at a time per device (the engine's one stream).
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/decode_layer.h"
#include "kernels/cuda/gemv_device.cuh"
#include "kernels/cuda/paged_decode.cuh"
#include "kernels/cuda/pdl.cuh"

namespace vlm::ops::cuda {

namespace {

constexpr int kThreads = gemv::kWarps * 32;
static_assert(kThreads == paged::kDecodeThreads, "the GEMV and the decode task share the block");
constexpr int kDim = 64;         // the head dim instantiated (SmolLM2, Qwen2, Llama-3.2-1B)
constexpr int kMaxBlocksPerSm = 2;

__device__ unsigned g_barrier[2];  // arrivals, departures: zero between launches
__device__ unsigned g_tickets[paged::kMaxTickets];

template <class T>
struct LayerArgs {
  gemv::GemvParams qkv, o, gate_up, down;
  gemv::QkvOut qkv_out;
  gemv::RopeFreq freq;
  paged::PagedArgs<T> attn;
  T* attn_out;  // [rows, Hq, D]
  float* part_out;
  float* part_lse;
  int chunk, splits, batch;
};

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Every block of the grid has reached its `phase`-th barrier of this launch (phases count from 1) and its writes
// before it are visible to every block after it.
__device__ __forceinline__ void grid_barrier(unsigned phase) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(&g_barrier[0], 1u);
    const unsigned target = phase * gridDim.x;
    while (load_acquire(&g_barrier[0]) < target) {
    }
    __threadfence();
  }
  __syncthreads();
}

// The last block to leave zeroes the counters for the next launch (every block has passed its last barrier).
__device__ __forceinline__ void grid_depart() {
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(&g_barrier[1], 1u) == gridDim.x - 1) {
    atomicExch(&g_barrier[0], 0u);
    atomicExch(&g_barrier[1], 0u);
  }
}

template <class T, int kRows, int kGroup>
__global__ void __launch_bounds__(kThreads, 1) decoder_layer_kernel(const LayerArgs<T> a) {
  pdl::grid_begin();
  extern __shared__ uint4 smem_raw[];
  T* xs = reinterpret_cast<T*>(smem_raw);
  auto& sh = *reinterpret_cast<paged::DecodeShared<T, kDim, kGroup>*>(smem_raw);
  const gemv::QkvOut none{};
  // 1. q with RoPE, this step's K/V rows into the cache.
  gemv::gemv_block<T, T, kRows, gemv::kQkv>(a.qkv, a.qkv_out, a.freq, xs);
  gemv::prefetch_block_rows<T, gemv::kPlain>(a.o, none);
  grid_barrier(1);
  // 2. Attention: tasks (split, kv head, sequence); each group's last split task combines.
  const int tasks = a.splits * a.attn.heads_kv * a.batch;
  for (int t = blockIdx.x; t < tasks; t += gridDim.x) {
    const int split = t % a.splits, kvh = (t / a.splits) % a.attn.heads_kv, b = t / (a.splits * a.attn.heads_kv);
    paged::paged_decode_task<T, kDim, kGroup>(a.attn, a.chunk, a.splits, split, kvh, b, a.attn_out, a.part_out,
                                              a.part_lse, g_tickets, sh);
  }
  gemv::prefetch_block_rows<T, gemv::kSwiglu>(a.gate_up, none);
  grid_barrier(2);
  // 3. h = x + attn @ o^T.
  gemv::gemv_block<T, T, kRows, gemv::kPlain>(a.o, none, a.freq, xs);
  gemv::prefetch_block_rows<T, gemv::kPlain>(a.down, none);
  grid_barrier(3);
  // 4. act = silu(gate) * up of rmsnorm(h).
  gemv::gemv_block<T, T, kRows, gemv::kSwiglu>(a.gate_up, none, a.freq, xs);
  grid_barrier(4);
  // 5. y = h + act @ down^T.
  gemv::gemv_block<T, T, kRows, gemv::kPlain>(a.down, none, a.freq, xs);
  grid_depart();
}

using Kernel = void (*)(LayerArgs<bf16>);

template <int kRows>
Kernel kernel_for_group(int group) {
  return group == 3 ? decoder_layer_kernel<bf16, kRows, 3> : decoder_layer_kernel<bf16, kRows, paged::kMaxGroup>;
}

Kernel kernel_for(int rows, int group) {
  if (rows <= 1) return kernel_for_group<1>(group);
  if (rows <= 4) return kernel_for_group<4>(group);
  return kernel_for_group<kGemvMaxRows>(group);
}

// Blocks of the persistent grid: as many as stay resident (at most kMaxBlocksPerSm per SM), 0 when the device has no
// cooperative launch. Asked once per (device, kernel, shared memory).
int resident_blocks(int device, Kernel kernel, size_t smem) {
  static std::mutex mu;
  static std::map<std::pair<std::pair<int, const void*>, size_t>, int> known;
  const std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(std::make_pair(device, reinterpret_cast<const void*>(kernel)), smem);
  if (auto it = known.find(key); it != known.end()) return it->second;
  int cooperative = 0, per_sm = 0;
  VLM_CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
  VLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  const int blocks = cooperative ? std::min(per_sm, kMaxBlocksPerSm) * multiprocessors(device) : 0;
  known.emplace(key, blocks);
  return blocks;
}

}  // namespace

bool decoder_layer_decode(Tensor& y, const Tensor& x, const DecoderLayerWeights& w, Tensor& k_cache, Tensor& v_cache,
                          const PagedStepTables& step, float theta, float scale) {
  const int64_t rows = x.dim(0), hidden = x.dim(1), heads_kv = k_cache.dim(2), dim = k_cache.dim(3);
  const int64_t heads_q = w.qkv_w.dim(0) / dim - 2 * heads_kv, inter = w.gate_up_w.dim(0) / 2;
  const int64_t batch = step.cu_seqlens_q.dim(0) - 1;
  if (x.dtype() != DType::bf16 || dim != kDim || rows < 1 || rows > kGemvMaxRows || step.max_seqlen_q > 1 ||
      batch < 1 || batch * heads_kv > paged::kMaxTickets || heads_q % heads_kv != 0)
    return false;
  const int group = static_cast<int>(heads_q / heads_kv);
  const Device dev = x.device();
  // Scratch between the phases.
  Tensor q = scratch(Shape{rows, heads_q, dim}, DType::bf16, dev);
  Tensor attn = scratch(Shape{rows, heads_q, dim}, DType::bf16, dev);
  Tensor h = scratch(Shape{rows, hidden}, DType::bf16, dev);
  Tensor act = scratch(Shape{rows, inter}, DType::bf16, dev);
  const Tensor attn_rows = attn.view({rows, heads_q * dim});
  if (!gemv::gemv_fits(x, w.qkv_w, w.attn_norm, rows) || !gemv::gemv_fits(attn_rows, w.o_w, Tensor(), rows) ||
      !gemv::gemv_fits(h, w.gate_up_w, w.mlp_norm, rows) || !gemv::gemv_fits(act, w.down_w, Tensor(), rows) ||
      dim / 2 > gemv::kMaxRopeHalf)
    return false;

  paged::PagedArgs<bf16> pa{};
  pa.q = ptr<bf16>(q);
  pa.k_cache = ptr<bf16>(k_cache);
  pa.v_cache = ptr<bf16>(v_cache);
  pa.block_tables = ptr<int32_t>(step.block_tables);
  pa.context_lens = ptr<int32_t>(step.context_lens);
  pa.cu_q = ptr<int32_t>(step.cu_seqlens_q);
  pa.q_stride = heads_q * dim;
  pa.tokens_q = rows;
  pa.heads_q = static_cast<int>(heads_q);
  pa.heads_kv = static_cast<int>(heads_kv);
  pa.dim = static_cast<int>(dim);
  pa.block_size = static_cast<int>(k_cache.dim(1));
  pa.max_blocks = static_cast<int>(step.block_tables.dim(1));
  pa.num_blocks = static_cast<int>(k_cache.dim(0));
  pa.max_q = step.max_seqlen_q;
  pa.max_ctx = step.max_context_len;
  pa.scale = scale;
  if (!paged::decode_applies(pa) || group > paged::kMaxGroup || k_cache.dim(0) > INT32_MAX ||
      step.block_tables.dim(1) > INT32_MAX)
    return false;

  const Kernel kernel = kernel_for(static_cast<int>(rows), group);
  const int64_t staged = rows * std::max({hidden, heads_q * dim, inter}) * static_cast<int64_t>(sizeof(bf16));
  const size_t decode_smem = group == 3 ? sizeof(paged::DecodeShared<bf16, kDim, 3>)
                                        : sizeof(paged::DecodeShared<bf16, kDim, paged::kMaxGroup>);
  const size_t smem = std::max(static_cast<size_t>(staged), decode_smem);
  const int blocks = resident_blocks(dev.index, kernel, smem);
  if (blocks < 1) return false;

  LayerArgs<bf16> a{};
  a.qkv = gemv::gemv_params(Tensor(), x, w.attn_norm, w.attn_eps, w.qkv_w, w.qkv_b, Tensor(), rows,
                            (heads_q + 2 * heads_kv) * (dim / 2));
  a.qkv_out = gemv::qkv_out(q, k_cache, v_cache, step.positions, step.slot_mapping, theta);
  a.freq = gemv::rope_freq(dim, theta);
  a.o = gemv::gemv_params(h, attn_rows, Tensor(), 0.f, w.o_w, w.o_b, x, rows, hidden);
  a.gate_up = gemv::gemv_params(act, h, w.mlp_norm, w.mlp_eps, w.gate_up_w, w.gate_up_b, Tensor(), rows, inter);
  a.down = gemv::gemv_params(y, act, Tensor(), 0.f, w.down_w, w.down_b, h, rows, hidden);
  a.attn = pa;
  a.attn_out = ptr<bf16>(attn);
  // Splits over the persistent grid: about one task per block.
  const paged::DecodeSplit split = paged::decode_split(batch, heads_kv, step.max_context_len, std::max(blocks / 2, 1));
  a.chunk = split.chunk;
  a.splits = split.splits;
  a.batch = static_cast<int>(batch);
  Tensor part_out, part_lse;
  if (split.splits > 1) {
    part_out = scratch(Shape{split.splits, rows, heads_q, dim}, DType::f32, dev);
    part_lse = scratch(Shape{split.splits, rows, heads_q}, DType::f32, dev);
    a.part_out = ptr<float>(part_out);
    a.part_lse = ptr<float>(part_lse);
  }

  DeviceGuard guard(dev);
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream_of(dev);
  config.attrs = attr;
  config.numAttrs = 1;
  VLM_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, a));
  VLM_CUDA_CHECK_LAUNCH();
  check_index_errors_now("decoder_layer_decode", dev);
  return true;
}

}  // namespace vlm::ops::cuda
