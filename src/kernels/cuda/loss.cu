// Softmax cross-entropy on CUDA, forward and backward fused: one block per row; the vocabulary is read in
// blockDim-wide chunks with an online (max, sum of exp) per thread in fp32, combined by a fixed-order block
// reduction; then, for the backward, each thread overwrites its own elements with (softmax - onehot) * dloss. The
// logits are never copied (bf16 logits stay bf16) and dlogits may alias them: every element is read before it is
// written, by the thread that writes it, and the target logit is read before the block's first barrier.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace vlm::ops::cuda {

namespace {

int vocab_threads(int64_t vocab) {
  if (vocab <= 256) return 32;
  if (vocab <= 2048) return 128;
  return 256;
}

// losses (optional): lse - logits[target]; dlogits (optional): (softmax - onehot) * dloss. Ignored rows give loss 0
// and zero gradients; a bad target gives NaN and is recorded.
template <class T>
__global__ void cross_entropy_kernel(float* __restrict__ losses, T* dlogits, const T* logits,
                                     const int32_t* __restrict__ targets, int64_t vocab, float dloss,
                                     int ignore_index, IndexErrorRecord* rec) {
  __shared__ MaxSum scratch[32];
  const int64_t row = blockIdx.x;
  const int32_t y = targets[row];
  const T* x = logits + row * vocab;
  T* dx = dlogits != nullptr ? dlogits + row * vocab : nullptr;
  if (y == ignore_index || y < 0 || y >= vocab) {
    const bool bad = y != ignore_index;
    if (bad && threadIdx.x == 0) record_index_error(rec, IndexErrorOp::cross_entropy, row, y, vocab);
    const float value = bad ? NAN : 0.f;
    if (losses != nullptr && threadIdx.x == 0) losses[row] = value;
    if (dx != nullptr)
      for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) dx[v] = from_f32<T>(value);
    return;
  }
  const float x_target = threadIdx.x == 0 ? to_f32(x[y]) : 0.f;  // before dx (which may be x) is written
  MaxSum state{-INFINITY, 0.f};
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) state = max_sum_add(state, to_f32(x[v]));
  state = block_max_sum(state, scratch);
  const float lse = state.m + logf(state.s);
  if (losses != nullptr && threadIdx.x == 0) losses[row] = lse - x_target;
  if (dx == nullptr) return;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
    float g = expf(to_f32(x[v]) - lse) * dloss;
    if (v == y) g -= dloss;
    dx[v] = from_f32<T>(g);
  }
}

}  // namespace

void cross_entropy(Tensor& losses, Tensor& dlogits, const Tensor& logits, const Tensor& targets, float dloss,
                   int ignore_index) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  if (rows == 0) return;
  const Device dev = logits.device();
  DeviceGuard guard(dev);
  IndexErrorRecord* rec = index_error_record(dev);
  const char* op = !dlogits.defined() ? "cross_entropy_forward"
                   : losses.defined() ? "cross_entropy_forward_backward"
                                      : "cross_entropy_backward";
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_kernel<T><<<static_cast<unsigned>(rows), vocab_threads(vocab), 0, stream_of(dev)>>>(
        ptr_or_null<float>(losses), ptr_or_null<T>(dlogits), ptr<T>(logits), ptr<int32_t>(targets), vocab, dloss,
        ignore_index, rec);
  });
  VLM_CUDA_CHECK_LAUNCH();
  check_index_errors_now(op, dev);
}

}  // namespace vlm::ops::cuda
