// The optimizer ops on CUDA: a fused multi-tensor AdamW over fp32 master weights (optionally writing the bf16 weight
// copy in the same pass) and the global sum of squares for grad-norm clipping. Both take a table of up to
// kMaxTensors tensors by value (kernel parameters, under the 4 KiB limit): every tensor is cut into fixed chunks,
// the blocks of one launch cover the chunks of all its tensors, and a block finds its tensor in the table's prefix
// of block counts. sum_of_squares writes one fp64 partial per block, then one block adds the partials in order, so
// the result depends on the tensor list alone (deterministic); it then synchronizes once to return the value.
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace vlm::ops::cuda {

namespace {

constexpr int kMaxTensors = 64;
constexpr int kThreads = 256;
constexpr int64_t kAdamChunk = 8192;     // elements per AdamW block
constexpr int64_t kSquareChunk = 16384;  // elements per sum_of_squares block

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

struct SquaresTable {
  const void* data[kMaxTensors];
  int64_t n[kMaxTensors];
  int64_t block_start[kMaxTensors + 1];
  int is_bf16[kMaxTensors];
  int count;
};

// The tensor of block `blk` in a table's block prefix (tables are short: a linear scan).
__device__ __forceinline__ int find_tensor(const int64_t* block_start, int count, int64_t blk) {
  int t = 0;
  while (t + 1 < count && block_start[t + 1] <= blk) ++t;
  return t;
}

// p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p), the formulas of cpu/optimizer.cpp.
__global__ void adamw_kernel(const AdamWTable table, const AdamWScalars s) {
  const int64_t blk = blockIdx.x;
  const int t = find_tensor(table.block_start, table.count, blk);
  const int64_t begin = (blk - table.block_start[t]) * kAdamChunk;
  const int64_t end = min(table.n[t], begin + kAdamChunk);
  float* param = table.param[t];
  const float* grad = table.grad[t];
  float* m = table.m[t];
  float* v = table.v[t];
  bf16* copy = table.param_bf16[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float g = grad[i] * s.grad_scale;
    const float mi = s.beta1 * m[i] + (1.f - s.beta1) * g;
    const float vi = s.beta2 * v[i] + (1.f - s.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / s.bias_correction1;
    const float v_hat = vi / s.bias_correction2;
    const float p = param[i];
    const float updated = p - s.lr * (m_hat / (sqrtf(v_hat) + s.eps) + s.weight_decay * p);
    param[i] = updated;
    if (copy != nullptr) copy[i] = __float2bfloat16_rn(updated);
  }
}

__global__ void squares_partial_kernel(const SquaresTable table, double* __restrict__ partial) {
  __shared__ double scratch[32];
  const int64_t blk = blockIdx.x;
  const int t = find_tensor(table.block_start, table.count, blk);
  const int64_t begin = (blk - table.block_start[t]) * kSquareChunk;
  const int64_t end = min(table.n[t], begin + kSquareChunk);
  double acc = 0.0;
  if (table.is_bf16[t]) {
    const bf16* x = static_cast<const bf16*>(table.data[t]);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const double xi = __bfloat162float(x[i]);
      acc += xi * xi;
    }
  } else {
    const float* x = static_cast<const float*>(table.data[t]);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const double xi = x[i];
      acc += xi * xi;
    }
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blk] = acc;
}

// One block: out[0] = sum of the n partials (fixed lanes, then the fixed block tree).
__global__ void sum_partials_kernel(const double* __restrict__ partial, int64_t n, double* out) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) out[0] = acc;
}

}  // namespace

void adamw_step_multi(const std::vector<AdamWTensors>& tensors, const AdamWScalars& s) {
  if (tensors.empty()) return;
  const Device dev = tensors.front().param.device();
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_of(dev);
  size_t next = 0;
  while (next < tensors.size()) {
    AdamWTable table{};
    int64_t blocks = 0;
    for (; next < tensors.size() && table.count < kMaxTensors; ++next) {
      const AdamWTensors& t = tensors[next];
      const int64_t n = t.param.numel();
      if (n == 0) continue;
      const int i = table.count++;
      table.param[i] = ptr<float>(t.param);
      table.grad[i] = ptr<float>(t.grad);
      table.m[i] = ptr<float>(t.m);
      table.v[i] = ptr<float>(t.v);
      table.param_bf16[i] = ptr_or_null<bf16>(t.param_bf16);
      table.n[i] = n;
      table.block_start[i] = blocks;
      blocks += ceil_div(n, kAdamChunk);
    }
    table.block_start[table.count] = blocks;
    if (blocks == 0) continue;
    adamw_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(table, s);
    VLM_CUDA_CHECK_LAUNCH();
  }
}

double sum_of_squares(const std::vector<Tensor>& tensors, Device device) {
  int64_t total_blocks = 0;
  for (const Tensor& t : tensors) total_blocks += ceil_div(t.numel(), kSquareChunk);
  if (total_blocks == 0) return 0.0;
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  // fp64 partials and the result, stored in an 8-byte-element scratch tensor (core has no f64 dtype).
  Tensor partial = scratch(Shape{total_blocks + 1}, DType::i64, device);
  double* partial_p = static_cast<double*>(partial.raw_data());
  double* result_p = partial_p + total_blocks;
  size_t next = 0;
  int64_t offset = 0;
  while (next < tensors.size()) {
    SquaresTable table{};
    int64_t blocks = 0;
    for (; next < tensors.size() && table.count < kMaxTensors; ++next) {
      const Tensor& t = tensors[next];
      if (t.numel() == 0) continue;
      const int i = table.count++;
      table.data[i] = t.raw_data();
      table.is_bf16[i] = t.dtype() == DType::bf16 ? 1 : 0;
      table.n[i] = t.numel();
      table.block_start[i] = blocks;
      blocks += ceil_div(t.numel(), kSquareChunk);
    }
    table.block_start[table.count] = blocks;
    if (blocks == 0) continue;
    squares_partial_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(table, partial_p + offset);
    VLM_CUDA_CHECK_LAUNCH();
    offset += blocks;
  }
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(partial_p, total_blocks, result_p);
  VLM_CUDA_CHECK_LAUNCH();
  double result = 0.0;
  VLM_CUDA_CHECK(cudaMemcpyAsync(&result, result_p, sizeof(double), cudaMemcpyDeviceToHost, stream));
  VLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

}  // namespace vlm::ops::cuda
