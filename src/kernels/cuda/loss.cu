// Softmax cross-entropy on CUDA, forward and backward fused, one block per row (and argmax_rows, the greedy
// decode's pick, and gumbel_argmax_rows, its sampling form: a block per row, or per chunk of a row when there are
// few rows):
//   pass 1 reads the row once with 16-byte vectors (up to kUnroll loads in flight per thread) and keeps an online
//          (max, sum of exp) per thread in fp32, combined by a fixed-order block reduction: lse = max + log(sum);
//   pass 2 (the backward) reads the row again and overwrites it with (softmax - onehot) * dloss. Rows of a large
//          vocabulary get 1024-thread blocks, at most 2 per SM, so the rows in flight (2 x 132 x 96 KB for bf16 x
//          49152) stay well inside the 50 MB L2 and the second read mostly hits it: the logits cross HBM about
//          once each way. They are never copied (bf16 logits stay bf16).
// A row whose start is not 16-byte aligned (vocab not a multiple of the vector width) takes scalar elements before
// its first 16-byte boundary and after its last full vector; when dlogits and logits are aligned differently every
// row is scalar. dlogits may alias logits: every element is read before it is written, by the thread that writes
// it, and the target logit is read before the block's first barrier.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/gumbel.h"

namespace vlm::ops::cuda {

namespace {

template <class T>
constexpr int kUnroll = sizeof(T) == 2 ? 3 : 4;  // 16-byte loads in flight per thread (fits 32 registers)
constexpr int kMaxThreads = 1024;  // threads per row for large vocabularies

int vocab_threads(int64_t vocab) {
  if (vocab <= 256) return 32;
  if (vocab <= 2048) return 128;
  if (vocab <= 16384) return 256;
  return kMaxThreads;
}

// A row of n elements at p: [0, head) scalar, then `vecs` 16-byte vectors, then [tail_begin, n) scalar.
// vectorize = false: all scalar. (Indices within a row are int: the host checks vocab < 2^31.)
struct RowSplit {
  int head, vecs, tail_begin;
};
template <class T>
__device__ __forceinline__ RowSplit split_row(const T* p, int n, bool vectorize) {
  constexpr int kV = kVec16<T>;
  if (!vectorize) return {n, 0, n};
  const int misaligned = static_cast<int>((reinterpret_cast<uintptr_t>(p) % 16) / sizeof(T));
  const int head = min(n, misaligned == 0 ? 0 : kV - misaligned);
  const int vecs = (n - head) / kV;
  return {head, vecs, head + vecs * kV};
}

// Adds the kV values of a vector to an online state: one rescale for the vector's max, then one exp per value
// (__expf of x - max <= 0: relative error ~1e-7 near the max, which is what the sum is made of). A state or a max
// that is not finite (nothing but -inf so far, +inf or NaN) takes the exact scalar rule, value by value.
template <int kV>
__device__ __forceinline__ MaxSum max_sum_add_vec(MaxSum a, const float (&v)[kV]) {
  float m = v[0];
#pragma unroll
  for (int j = 1; j < kV; ++j) m = fmaxf(m, v[j]);
  const float new_m = fmaxf(a.m, m);
  if (!(fabsf(new_m) < INFINITY)) {
#pragma unroll
    for (int j = 0; j < kV; ++j) a = max_sum_add(a, v[j]);
    return a;
  }
  if (new_m > a.m) {
    a.s *= __expf(a.m - new_m);
    a.m = new_m;
  }
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < kV; ++j) s += __expf(v[j] - a.m);
  a.s += s;
  return a;
}

// losses (optional): lse - logits[target]; dlogits (optional): (softmax - onehot) * dloss. Ignored rows give loss 0
// and zero gradients; a bad target gives NaN and is recorded.
template <class T>
__global__ void __launch_bounds__(kMaxThreads, 2)
    cross_entropy_kernel(float* __restrict__ losses, T* dlogits, const T* logits,
                         const int32_t* __restrict__ targets, int64_t vocab, float dloss, int ignore_index,
                         bool vectorize, IndexErrorRecord* rec) {
  pdl::grid_begin();
  constexpr int kV = kVec16<T>;
  __shared__ MaxSum scratch[32];
  const int64_t row = blockIdx.x;
  const int tid = threadIdx.x, bd = blockDim.x, n = static_cast<int>(vocab);
  const int32_t y = targets[row];
  const T* x = logits + row * vocab;
  T* dx = dlogits != nullptr ? dlogits + row * vocab : nullptr;
  const RowSplit sp = split_row(x, n, vectorize);  // dx (when given) is aligned like x
  const T* xv = x + sp.head;                            // 16-byte aligned when sp.vecs > 0
  T* dxv = dx != nullptr ? dx + sp.head : nullptr;

  if (y == ignore_index || y < 0 || y >= vocab) {
    const bool bad = y != ignore_index;
    if (bad && tid == 0) record_index_error(rec, IndexErrorOp::cross_entropy, row, y, vocab);
    const float value = bad ? NAN : 0.f;
    if (losses != nullptr && tid == 0) losses[row] = value;
    if (dx == nullptr) return;
    for (int e = tid; e < sp.head; e += bd) dx[e] = from_f32<T>(value);
    for (int e = sp.tail_begin + tid; e < n; e += bd) dx[e] = from_f32<T>(value);
    float fill[kV];
#pragma unroll
    for (int j = 0; j < kV; ++j) fill[j] = value;
    for (int i = tid; i < sp.vecs; i += bd) store_vec16(dxv + i * kV, fill);
    return;
  }
  const float x_target = tid == 0 ? to_f32(x[y]) : 0.f;  // before dx (which may be x) is written

  // Pass 1: the online (max, sum of exp) of this thread's elements.
  MaxSum state{-INFINITY, 0.f};
  for (int e = tid; e < sp.head; e += bd) state = max_sum_add(state, to_f32(x[e]));
  for (int e = sp.tail_begin + tid; e < n; e += bd) state = max_sum_add(state, to_f32(x[e]));
  for (int i = tid; i < sp.vecs; i += kUnroll<T> * bd) {
    uint4 raw[kUnroll<T>];
#pragma unroll
    for (int u = 0; u < kUnroll<T>; ++u)
      if (i + u * bd < sp.vecs) raw[u] = load_raw16(xv + (i + u * bd) * kV);
#pragma unroll
    for (int u = 0; u < kUnroll<T>; ++u) {
      if (i + u * bd >= sp.vecs) break;
      float v[kV];
      unpack_vec16<T>(raw[u], v);
      state = max_sum_add_vec(state, v);
    }
  }
  state = block_max_sum(state, scratch);
  const float lse = state.m + logf(state.s);
  if (losses != nullptr && tid == 0) losses[row] = lse - x_target;
  if (dx == nullptr) return;

  // Pass 2: dx = (exp(x - lse) - [e == y]) * dloss, each element by the thread that read it.
  auto grad = [&](float xe, int e) {
    float g = __expf(xe - lse) * dloss;
    if (e == y) g -= dloss;
    return g;
  };
  for (int e = tid; e < sp.head; e += bd) dx[e] = from_f32<T>(grad(to_f32(x[e]), e));
  for (int e = sp.tail_begin + tid; e < n; e += bd) dx[e] = from_f32<T>(grad(to_f32(x[e]), e));
  for (int i = tid; i < sp.vecs; i += kUnroll<T> * bd) {
    uint4 raw[kUnroll<T>];
#pragma unroll
    for (int u = 0; u < kUnroll<T>; ++u)
      if (i + u * bd < sp.vecs) raw[u] = load_raw16(xv + (i + u * bd) * kV);
#pragma unroll
    for (int u = 0; u < kUnroll<T>; ++u) {
      const int vi = i + u * bd;
      if (vi >= sp.vecs) break;
      float v[kV];
      unpack_vec16<T>(raw[u], v);
      const int e0 = sp.head + vi * kV;
#pragma unroll
      for (int j = 0; j < kV; ++j) v[j] = grad(v[j], e0 + j);
      store_vec16(dxv + vi * kV, v);
    }
  }
}

// argmax_rows: block (row x, chunk y) scans its chunk of the row; each thread keeps the first maximum of its strided
// elements, then a fixed-order warp and block reduction takes the larger value, the lower index on ties. idx < 0:
// nothing seen yet. With one chunk the block writes the row's id; with several (few rows: a row's 49k logits would
// otherwise stream through one SM) it writes its chunk's best and argmax_merge_kernel picks among them by the same
// rule, so the id is the same either way.
struct ArgMax {
  float v;
  int idx;
};
__device__ __forceinline__ ArgMax arg_max_pick(ArgMax a, ArgMax b) {
  if (a.idx < 0) return b;
  if (b.idx < 0) return a;
  return (b.v > a.v || (b.v == a.v && b.idx < a.idx)) ? b : a;
}

constexpr int kMinArgmaxChunk = 2048;  // elements a block of a split row scans at least

// kGumbel: the score of element v is x * inv_temperature[row] + gumbel::noise(keys[row], v) (rows with
// inv_temperature 0: x), gumbel_argmax_rows's sample.
template <class T, bool kGumbel>
__global__ void argmax_rows_kernel(int32_t* ids, ArgMax* partial, const T* logits, int vocab, int chunk, int banned,
                                   const float* inv_temperature, const int64_t* keys) {
  pdl::grid_begin();
  __shared__ ArgMax warp_best[kMaxThreads / 32];
  const int64_t r = blockIdx.x;
  const T* row = logits + r * vocab;
  float s = 0.f;
  uint64_t key = 0;
  if constexpr (kGumbel) {
    s = inv_temperature[r];
    key = static_cast<uint64_t>(keys[r]);
  }
  const int begin = static_cast<int>(blockIdx.y) * chunk, end = min(vocab, begin + chunk);
  ArgMax best{-INFINITY, -1};
  for (int v = begin + static_cast<int>(threadIdx.x); v < end; v += blockDim.x) {
    float x = to_f32(row[v]);
    if (kGumbel && s > 0.f && !isnan(x)) x = x * s + gumbel::noise(key, v);
    if (v != banned && !isnan(x) && (best.idx < 0 || x > best.v)) best = {x, v};
  }
  for (int off = 16; off > 0; off >>= 1) {
    const ArgMax o{__shfl_down_sync(0xffffffffu, best.v, off), __shfl_down_sync(0xffffffffu, best.idx, off)};
    best = arg_max_pick(best, o);
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  if (lane == 0) warp_best[warp] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < warps; ++w) best = arg_max_pick(best, warp_best[w]);
    if (partial != nullptr)
      partial[r * gridDim.y + blockIdx.y] = best;
    else
      ids[r] = best.idx < 0 ? 0 : best.idx;
  }
}

// One warp per row: the best of the row's chunk results, by arg_max_pick (the lower index on ties).
__global__ void argmax_merge_kernel(int32_t* ids, const ArgMax* partial, int chunks) {
  pdl::grid_begin();
  const int64_t r = blockIdx.x;
  ArgMax best{-INFINITY, -1};
  for (int c = static_cast<int>(threadIdx.x); c < chunks; c += 32) best = arg_max_pick(best, partial[r * chunks + c]);
  for (int off = 16; off > 0; off >>= 1) {
    const ArgMax o{__shfl_down_sync(0xffffffffu, best.v, off), __shfl_down_sync(0xffffffffu, best.idx, off)};
    best = arg_max_pick(best, o);
  }
  if (threadIdx.x == 0) ids[r] = best.idx < 0 ? 0 : best.idx;
}

// The picks of argmax_rows (inv_temperature and keys null) and gumbel_argmax_rows on validated tensors.
template <bool kGumbel>
void pick_rows(const char* op, Tensor& ids, const Tensor& logits, int32_t banned, const float* inv_temperature,
               const int64_t* keys) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  if (rows == 0) return;
  VLM_CHECK(rows <= INT32_MAX, "ops::", op, ": ", rows, " rows exceed the CUDA grid");
  const Device dev = logits.device();
  DeviceGuard guard(dev);
  cudaStream_t stream = stream_of(dev);
  const int banned_in_row = banned >= 0 && banned < vocab ? static_cast<int>(banned) : -1;
  // Fewer rows than two waves of blocks: split each row into chunks of at least kMinArgmaxChunk elements.
  const int64_t waves = 2 * static_cast<int64_t>(multiprocessors(dev.index));
  int64_t chunks = 1;
  if (rows < waves) chunks = std::min({ceil_div(waves, rows), ceil_div(vocab, kMinArgmaxChunk), int64_t{65535}});
  const int64_t chunk = ceil_div(vocab, std::max<int64_t>(chunks, 1));
  chunks = ceil_div(vocab, chunk);
  Tensor partial;
  if (chunks > 1) partial = scratch(Shape{rows * chunks * 2}, DType::i32, dev);  // an ArgMax (8 bytes) per chunk
  ArgMax* part = chunks > 1 ? static_cast<ArgMax*>(partial.raw_data()) : nullptr;
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    pdl::launch(argmax_rows_kernel<T, kGumbel>, dim3(static_cast<unsigned>(rows), static_cast<unsigned>(chunks)),
                vocab_threads(chunk), 0, stream, ptr<int32_t>(ids), part, ptr<T>(logits), static_cast<int>(vocab),
                static_cast<int>(chunk), banned_in_row, inv_temperature, keys);
  });
  VLM_CUDA_CHECK_LAUNCH();
  if (chunks > 1) {
    pdl::launch(argmax_merge_kernel, static_cast<unsigned>(rows), 32, 0, stream, ptr<int32_t>(ids),
                static_cast<const ArgMax*>(part), static_cast<int>(chunks));
    VLM_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void argmax_rows(Tensor& ids, const Tensor& logits, int32_t banned) {
  pick_rows<false>("argmax_rows", ids, logits, banned, nullptr, nullptr);
}

void gumbel_argmax_rows(Tensor& ids, const Tensor& logits, const Tensor& inv_temperature, const Tensor& keys,
                        int32_t banned) {
  pick_rows<true>("gumbel_argmax_rows", ids, logits, banned, ptr<float>(inv_temperature), ptr<int64_t>(keys));
}

void cross_entropy(Tensor& losses, Tensor& dlogits, const Tensor& logits, const Tensor& targets, float dloss,
                   int ignore_index) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  if (rows == 0) return;
  VLM_CHECK(vocab < (int64_t{1} << 31) - 16, "ops::cross_entropy: vocabulary of ", vocab,
            " exceeds the CUDA kernel's 2^31 - 16 (int indices within a row)");
  const Device dev = logits.device();
  DeviceGuard guard(dev);
  IndexErrorRecord* rec = index_error_record(dev);
  const char* op = !dlogits.defined() ? "cross_entropy_forward"
                   : losses.defined() ? "cross_entropy_forward_backward"
                                      : "cross_entropy_backward";
  // Vectors need dlogits to share the logits' offset within 16 bytes (each row is then split the same way).
  const bool vectorize =
      !dlogits.defined() ||
      (reinterpret_cast<uintptr_t>(dlogits.raw_data()) - reinterpret_cast<uintptr_t>(logits.raw_data())) % 16 == 0;
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    pdl::launch(cross_entropy_kernel<T>, static_cast<unsigned>(rows), vocab_threads(vocab), 0, stream_of(dev),
                ptr_or_null<float>(losses), ptr_or_null<T>(dlogits), ptr<T>(logits), ptr<int32_t>(targets), vocab,
                dloss, ignore_index, vectorize, rec);
  });
  VLM_CUDA_CHECK_LAUNCH();
  check_index_errors_now(op, dev);
}

}  // namespace vlm::ops::cuda
