// The optimizer ops on CUDA: a fused multi-tensor AdamW over fp32 master weights (optionally writing the bf16 weight
// copy in the same pass, optionally taking its global-norm clipping factor from a sum of squares on the device) and
// fp64 sums (of squares, for the grad norm; plain, for the loss). Both take a table of up to kMaxTensors tensors by
// value (kernel parameters, under the 4 KiB limit): every tensor is cut into fixed chunks, the blocks of one launch
// cover the chunks of all its tensors, and a block finds its tensor in the table's prefix of block counts. A sum
// writes one fp64 partial per block, then one block adds the partials in order, so the result depends on the tensor
// list alone (deterministic). Nothing here synchronizes.
#include <vector>

#include "kernels/adamw_scalars.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace vlm::ops::cuda {

namespace {

constexpr int kMaxTensors = 64;
constexpr int kThreads = 256;
constexpr int64_t kAdamChunk = 8192;     // elements per AdamW block
constexpr int64_t kSumChunk = 16384;     // elements per block of a sum
constexpr int64_t kZeroChunk = 65536;    // bytes per block of zero_multi

struct AdamWTable {
  float* param[kMaxTensors];
  const float* grad[kMaxTensors];
  float* m[kMaxTensors];
  float* v[kMaxTensors];
  bf16* param_bf16[kMaxTensors];  // null: no copy
  int64_t n[kMaxTensors];
  int64_t block_start[kMaxTensors + 1];  // block_start[i]: the first block of tensor i; [count]: the total
  int count;
};

struct SumTable {
  const void* data[kMaxTensors];
  int64_t n[kMaxTensors];
  int64_t block_start[kMaxTensors + 1];
  int is_bf16[kMaxTensors];
  int count;
};

struct ZeroTable {
  unsigned char* data[kMaxTensors];
  int64_t bytes[kMaxTensors];
  int64_t block_start[kMaxTensors + 1];
  int count;
};

// The tensor of block `blk` in a table's block prefix (tables are short: a linear scan).
__device__ __forceinline__ int find_tensor(const int64_t* block_start, int count, int64_t blk) {
  int t = 0;
  while (t + 1 < count && block_start[t + 1] <= blk) ++t;
  return t;
}

// p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p), the formulas of cpu/optimizer.cpp, for one element.
__device__ __forceinline__ float adamw_update(float p, float g_raw, float& m, float& v, const AdamWScalars& s) {
  const float g = g_raw * s.grad_scale;
  m = s.beta1 * m + (1.f - s.beta1) * g;
  v = s.beta2 * v + (1.f - s.beta2) * g * g;
  const float m_hat = m / s.bias_correction1;
  const float v_hat = v / s.bias_correction2;
  return p - s.lr * (m_hat / (sqrtf(v_hat) + s.eps) + s.weight_decay * p);
}

// A block updates one chunk of one tensor: 4 elements per thread per iteration with 16-byte loads and stores when
// the chunk's start is 16-byte aligned in all four arrays (8-byte stores of the bf16 copy), one at a time otherwise
// and for the chunk's tail.
__global__ void adamw_kernel(const AdamWTable table, AdamWScalars s) {
  pdl::grid_begin();
  if (s.grad_sum_of_squares != nullptr) s.grad_scale *= clip_factor(*s.grad_sum_of_squares, s.max_grad_norm);
  const int64_t blk = blockIdx.x;
  const int t = find_tensor(table.block_start, table.count, blk);
  const int64_t begin = (blk - table.block_start[t]) * kAdamChunk;
  const int64_t end = min(table.n[t], begin + kAdamChunk);
  float* param = table.param[t];
  const float* grad = table.grad[t];
  float* m = table.m[t];
  float* v = table.v[t];
  bf16* copy = table.param_bf16[t];
  int64_t scalar_from = begin;
  const bool aligned = (reinterpret_cast<uintptr_t>(param + begin) | reinterpret_cast<uintptr_t>(grad + begin) |
                        reinterpret_cast<uintptr_t>(m + begin) | reinterpret_cast<uintptr_t>(v + begin)) %
                               16 == 0 &&
                       (copy == nullptr || reinterpret_cast<uintptr_t>(copy + begin) % 8 == 0);
  if (aligned) {
    const int64_t quads = (end - begin) / 4;
    for (int64_t q = threadIdx.x; q < quads; q += blockDim.x) {
      const int64_t i = begin + 4 * q;
      float4 p4 = *reinterpret_cast<const float4*>(param + i);
      const float4 g4 = *reinterpret_cast<const float4*>(grad + i);
      float4 m4 = *reinterpret_cast<const float4*>(m + i);
      float4 v4 = *reinterpret_cast<const float4*>(v + i);
      p4.x = adamw_update(p4.x, g4.x, m4.x, v4.x, s);
      p4.y = adamw_update(p4.y, g4.y, m4.y, v4.y, s);
      p4.z = adamw_update(p4.z, g4.z, m4.z, v4.z, s);
      p4.w = adamw_update(p4.w, g4.w, m4.w, v4.w, s);
      *reinterpret_cast<float4*>(param + i) = p4;
      *reinterpret_cast<float4*>(m + i) = m4;
      *reinterpret_cast<float4*>(v + i) = v4;
      if (copy != nullptr) {
        const __nv_bfloat162 lo = __floats2bfloat162_rn(p4.x, p4.y), hi = __floats2bfloat162_rn(p4.z, p4.w);
        uint2 packed;
        packed.x = *reinterpret_cast<const uint32_t*>(&lo);
        packed.y = *reinterpret_cast<const uint32_t*>(&hi);
        *reinterpret_cast<uint2*>(copy + i) = packed;
      }
    }
    scalar_from = begin + 4 * quads;
  }
  for (int64_t i = scalar_from + threadIdx.x; i < end; i += blockDim.x) {
    float mi = m[i], vi = v[i];
    const float updated = adamw_update(param[i], grad[i], mi, vi, s);
    m[i] = mi;
    v[i] = vi;
    param[i] = updated;
    if (copy != nullptr) copy[i] = __float2bfloat16_rn(updated);
  }
}

template <bool kSquare>
__global__ void sum_partial_kernel(const SumTable table, double* __restrict__ partial) {
  pdl::grid_begin();
  __shared__ double scratch[32];
  const int64_t blk = blockIdx.x;
  const int t = find_tensor(table.block_start, table.count, blk);
  const int64_t begin = (blk - table.block_start[t]) * kSumChunk;
  const int64_t end = min(table.n[t], begin + kSumChunk);
  double acc = 0.0;
  if (table.is_bf16[t]) {
    const bf16* x = static_cast<const bf16*>(table.data[t]);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const double xi = __bfloat162float(x[i]);
      acc += kSquare ? xi * xi : xi;
    }
  } else {
    const float* x = static_cast<const float*>(table.data[t]);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const double xi = x[i];
      acc += kSquare ? xi * xi : xi;
    }
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blk] = acc;
}

// A block zeroes one kZeroChunk-byte chunk of one tensor: 16-byte stores over the chunk's 16-byte-aligned middle,
// single bytes over its ends.
__global__ void zero_kernel(const ZeroTable table) {
  pdl::grid_begin();
  const int64_t blk = blockIdx.x;
  const int t = find_tensor(table.block_start, table.count, blk);
  unsigned char* base = table.data[t];
  const int64_t begin = (blk - table.block_start[t]) * kZeroChunk;
  const int64_t end = min(table.bytes[t], begin + kZeroChunk);
  const int64_t to_aligned = static_cast<int64_t>((16 - reinterpret_cast<uintptr_t>(base + begin) % 16) % 16);
  const int64_t head = min(end, begin + to_aligned);
  const int64_t quads = (end - head) / 16;
  for (int64_t i = begin + threadIdx.x; i < head; i += blockDim.x) base[i] = 0;
  uint4* mid = reinterpret_cast<uint4*>(base + head);
  for (int64_t q = threadIdx.x; q < quads; q += blockDim.x) mid[q] = make_uint4(0, 0, 0, 0);
  for (int64_t i = head + 16 * quads + threadIdx.x; i < end; i += blockDim.x) base[i] = 0;
}

// One block: out[0] = sum of the n partials (fixed lanes, then the fixed block tree).
__global__ void sum_partials_kernel(const double* __restrict__ partial, int64_t n, double* out) {
  pdl::grid_begin();
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) out[0] = acc;
}

}  // namespace

namespace {

// The launches of a multi-tensor op: `items` in tables of up to kMaxTensors. fill(table, i, item) writes the item into
// slot i and returns its block count (0 leaves the slot to the next item); launch(table, blocks) runs one table.
template <class Table, class Item, class Fill, class Launch>
void launch_tables(const std::vector<Item>& items, Fill fill, Launch launch) {
  size_t next = 0;
  while (next < items.size()) {
    Table table{};
    int64_t blocks = 0;
    for (; next < items.size() && table.count < kMaxTensors; ++next) {
      const int64_t n = fill(table, table.count, items[next]);
      if (n == 0) continue;
      table.block_start[table.count++] = blocks;
      blocks += n;
    }
    table.block_start[table.count] = blocks;
    if (blocks > 0) launch(table, blocks);
  }
}

}  // namespace

void adamw_step_multi(const std::vector<AdamWTensors>& tensors, const AdamWScalars& s) {
  if (tensors.empty()) return;
  const Device dev = tensors.front().param.device();
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_of(dev);
  auto fill = [](AdamWTable& table, int i, const AdamWTensors& t) {
    table.param[i] = ptr<float>(t.param);
    table.grad[i] = ptr<float>(t.grad);
    table.m[i] = ptr<float>(t.m);
    table.v[i] = ptr<float>(t.v);
    table.param_bf16[i] = ptr_or_null<bf16>(t.param_bf16);
    table.n[i] = t.param.numel();
    return ceil_div(table.n[i], kAdamChunk);
  };
  launch_tables<AdamWTable>(tensors, fill, [&](const AdamWTable& table, int64_t blocks) {
    pdl::launch(adamw_kernel, static_cast<unsigned>(blocks), kThreads, 0, stream, table, s);
    VLM_CUDA_CHECK_LAUNCH();
  });
}

void zero_multi(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return;
  const Device dev = tensors.front().device();
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_of(dev);
  auto fill = [](ZeroTable& table, int i, const Tensor& t) {
    table.data[i] = static_cast<unsigned char*>(t.raw_data());
    table.bytes[i] = static_cast<int64_t>(t.nbytes());
    return ceil_div(table.bytes[i], kZeroChunk);
  };
  launch_tables<ZeroTable>(tensors, fill, [&](const ZeroTable& table, int64_t blocks) {
    pdl::launch(zero_kernel, static_cast<unsigned>(blocks), kThreads, 0, stream, table);
    VLM_CUDA_CHECK_LAUNCH();
  });
}

namespace {

// *result (device memory) = the fp64 sum (of squares when `square`) over every element of `tensors`; no sync.
void launch_sum(const std::vector<Tensor>& tensors, bool square, double* result, Device device) {
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  int64_t total_blocks = 0;
  for (const Tensor& t : tensors) total_blocks += ceil_div(t.numel(), kSumChunk);
  if (total_blocks == 0) {
    VLM_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(double), stream));
    return;
  }
  // fp64 partials in an 8-byte-element scratch tensor, released in stream order.
  Tensor partial = scratch(Shape{total_blocks}, DType::f64, device);
  double* partial_p = partial.data<double>();
  int64_t offset = 0;
  auto fill = [](SumTable& table, int i, const Tensor& t) {
    table.data[i] = t.raw_data();
    table.is_bf16[i] = t.dtype() == DType::bf16 ? 1 : 0;
    table.n[i] = t.numel();
    return ceil_div(table.n[i], kSumChunk);
  };
  launch_tables<SumTable>(tensors, fill, [&](const SumTable& table, int64_t blocks) {
    if (square) {
      pdl::launch(sum_partial_kernel<true>, static_cast<unsigned>(blocks), kThreads, 0, stream, table,
                  partial_p + offset);
    } else {
      pdl::launch(sum_partial_kernel<false>, static_cast<unsigned>(blocks), kThreads, 0, stream, table,
                  partial_p + offset);
    }
    VLM_CUDA_CHECK_LAUNCH();
    offset += blocks;
  });
  pdl::launch(sum_partials_kernel, 1, kThreads, 0, stream, partial_p, total_blocks, result);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void sum_of_squares_into(Tensor& out, const std::vector<Tensor>& tensors) {
  launch_sum(tensors, /*square=*/true, out.data<double>(), out.device());
}

void sum_into(Tensor& out, const Tensor& x) { launch_sum({x}, /*square=*/false, out.data<double>(), out.device()); }

}  // namespace vlm::ops::cuda
