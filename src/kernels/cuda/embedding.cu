// Row lookups on CUDA: embedding forward (a gather) and its deterministic backward, scatter_rows and gather_rows.
// Bad indices cannot abort on the device: the kernels record the first one (cuda_context.h) and poison what it
// would have produced with NaN (gathered rows); scatter_rows skips the row and records it.
//
// embedding_backward, sort-free and deterministic: a block owns kVocabTile rows of dtable and kEmbCols columns. It
// scans all ids in chunks, compacts (in token order, by warp ballots and a prefix over the warps) the tokens whose
// id falls in its rows, and each thread adds those tokens' values of its column into a shared-memory accumulator
// row. So each dtable element is summed by one thread in token order, and added (+=) once at the end.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace vlm::ops::cuda {

namespace {

constexpr int kRowThreads = 128;  // threads of a row copy
constexpr int kVocabTile = 64;    // dtable rows per embedding_backward block (32 KB accumulator: 7 blocks per SM)
constexpr int kEmbCols = 128;     // columns per embedding_backward block = its threads = ids per scan chunk

// out[i, :] = src[index[i], :]; a bad index gives a NaN row and is recorded.
template <class T>
__global__ void gather_rows_kernel(T* __restrict__ out, const T* __restrict__ src, const int32_t* __restrict__ index,
                                   int64_t src_rows, int64_t cols, IndexErrorRecord* rec, IndexErrorOp op) {
  const int64_t i = blockIdx.x;
  const int32_t id = index[i];
  T* o = out + i * cols;
  if (id < 0 || id >= src_rows) {
    if (threadIdx.x == 0) record_index_error(rec, op, i, id, src_rows);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) o[c] = from_f32<T>(NAN);
    return;
  }
  const T* s = src + static_cast<int64_t>(id) * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) o[c] = s[c];
}

// out[index[i], :] = src[i, :]; a bad index is recorded and its row skipped.
template <class T>
__global__ void scatter_rows_kernel(T* __restrict__ out, const T* __restrict__ src,
                                    const int32_t* __restrict__ index, int64_t out_rows, int64_t cols,
                                    IndexErrorRecord* rec) {
  const int64_t i = blockIdx.x;
  const int32_t id = index[i];
  if (id < 0 || id >= out_rows) {
    if (threadIdx.x == 0) record_index_error(rec, IndexErrorOp::scatter_rows, i, id, out_rows);
    return;
  }
  T* o = out + static_cast<int64_t>(id) * cols;
  const T* s = src + i * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) o[c] = s[c];
}

// Counts the uses of each out row; a second use of an in-range index is recorded (scatter_rows needs distinct ones).
__global__ void count_scatter_targets_kernel(int32_t* counts, const int32_t* __restrict__ index, int64_t n,
                                             int64_t out_rows, IndexErrorRecord* rec) {
  VLM_GRID_STRIDE_LOOP(i, n) {
    const int32_t id = index[i];
    if (id >= 0 && id < out_rows && atomicAdd(&counts[id], 1) != 0)
      record_index_error(rec, IndexErrorOp::scatter_rows, i, id, out_rows);
  }
}

template <class T>
__global__ void __launch_bounds__(kEmbCols) embedding_backward_kernel(float* __restrict__ dtable,
                                                                      const T* __restrict__ dout,
                                                                      const int32_t* __restrict__ ids, int64_t tokens,
                                                                      int64_t vocab, int64_t cols,
                                                                      IndexErrorRecord* rec) {
  __shared__ float acc[kVocabTile][kEmbCols];
  __shared__ int64_t match_token[kEmbCols];
  __shared__ int32_t match_row[kEmbCols];
  __shared__ int32_t warp_counts[kEmbCols / 32];
  __shared__ bool touched[kVocabTile];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t v0 = static_cast<int64_t>(blockIdx.x) * kVocabTile;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kEmbCols + tid;
  for (int r = 0; r < kVocabTile; ++r) acc[r][tid] = 0.f;
  if (tid < kVocabTile) touched[tid] = false;
  const bool report = blockIdx.x == 0 && blockIdx.y == 0;
  for (int64_t t0 = 0; t0 < tokens; t0 += kEmbCols) {
    const int64_t t = t0 + tid;
    const int32_t id = t < tokens ? ids[t] : -1;
    if (report && t < tokens && (id < 0 || id >= vocab))
      record_index_error(rec, IndexErrorOp::embedding_backward, t, id, vocab);
    const bool hit = t < tokens && id >= v0 && id < v0 + kVocabTile;
    const unsigned mask = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_counts[warp] = __popc(mask);
    __syncthreads();  // also orders the previous chunk's reads of match_* before this chunk's writes
    int offset = 0, total = 0;
    for (int w = 0; w < kEmbCols / 32; ++w) {
      if (w < warp) offset += warp_counts[w];
      total += warp_counts[w];
    }
    if (hit) {
      const int pos = offset + __popc(mask & ((1u << lane) - 1u));
      match_token[pos] = t;
      match_row[pos] = static_cast<int32_t>(id - v0);
      touched[id - v0] = true;
    }
    __syncthreads();
    if (c < cols)
      for (int j = 0; j < total; ++j) acc[match_row[j]][tid] += to_f32(dout[match_token[j] * cols + c]);
    __syncthreads();  // warp_counts is rewritten by the next chunk
  }
  if (c >= cols) return;
  for (int r = 0; r < kVocabTile && v0 + r < vocab; ++r)
    if (touched[r]) dtable[(v0 + r) * cols + c] += acc[r][tid];
}

void launch_gather(Tensor& out, const Tensor& src, const Tensor& index, IndexErrorOp op, const char* name) {
  const int64_t n = out.dim(0), cols = out.dim(1);
  if (n == 0) return;
  const Device dev = out.device();
  DeviceGuard guard(dev);
  IndexErrorRecord* rec = index_error_record(dev);
  dispatch_float(out.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    gather_rows_kernel<T><<<static_cast<unsigned>(n), kRowThreads, 0, stream_of(dev)>>>(
        ptr<T>(out), ptr<T>(src), ptr<int32_t>(index), src.dim(0), cols, rec, op);
  });
  VLM_CUDA_CHECK_LAUNCH();
  check_index_errors_now(name, dev);
}

}  // namespace

void embedding_forward(Tensor& out, const Tensor& table, const Tensor& ids) {
  launch_gather(out, table, ids, IndexErrorOp::embedding_forward, "embedding_forward");
}

void gather_rows(Tensor& out, const Tensor& src, const Tensor& index) {
  launch_gather(out, src, index, IndexErrorOp::gather_rows, "gather_rows");
}

void embedding_backward(Tensor& dtable, const Tensor& dout, const Tensor& ids) {
  const int64_t tokens = dout.dim(0), vocab = dtable.dim(0), cols = dtable.dim(1);
  if (tokens == 0 || vocab == 0 || cols == 0) return;
  const Device dev = dtable.device();
  DeviceGuard guard(dev);
  IndexErrorRecord* rec = index_error_record(dev);
  const dim3 grid(static_cast<unsigned>(ceil_div(vocab, kVocabTile)), static_cast<unsigned>(ceil_div(cols, kEmbCols)));
  VLM_CHECK(grid.y <= 65535, "ops::embedding_backward: ", cols, " columns exceed the CUDA grid");
  dispatch_float(dout.dtype(), "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    embedding_backward_kernel<T><<<grid, kEmbCols, 0, stream_of(dev)>>>(
        ptr<float>(dtable), ptr<T>(dout), ptr<int32_t>(ids), tokens, vocab, cols, rec);
  });
  VLM_CUDA_CHECK_LAUNCH();
  check_index_errors_now("embedding_backward", dev);
}

void scatter_rows(Tensor& out, const Tensor& src, const Tensor& index) {
  const int64_t n = src.dim(0), out_rows = out.dim(0), cols = out.dim(1);
  if (n == 0) return;
  const Device dev = out.device();
  DeviceGuard guard(dev);
  IndexErrorRecord* rec = index_error_record(dev);
  cudaStream_t stream = stream_of(dev);
  Tensor counts = scratch(Shape{out_rows}, DType::i32, dev);
  counts.zero_(current_stream(dev));
  count_scatter_targets_kernel<<<grid_for(n, 256), 256, 0, stream>>>(ptr<int32_t>(counts), ptr<int32_t>(index), n,
                                                                      out_rows, rec);
  VLM_CUDA_CHECK_LAUNCH();
  dispatch_float(out.dtype(), "scatter_rows", [&](auto tag) {
    using T = decltype(tag);
    scatter_rows_kernel<T><<<static_cast<unsigned>(n), kRowThreads, 0, stream>>>(ptr<T>(out), ptr<T>(src),
                                                                                  ptr<int32_t>(index), out_rows,
                                                                                  cols, rec);
  });
  VLM_CUDA_CHECK_LAUNCH();
  check_index_errors_now("scatter_rows", dev);
}

}  // namespace vlm::ops::cuda
