// Deterministic column reductions for parameter gradients (norm weights and biases, linear biases): sums over the
// rows of per-(row, column) values, added (+=) into f32 outputs, with no float atomics.
//   pass 1: a block owns a tile of kColTile columns x row_chunk rows (kRowLanes rows in flight, a fixed stride per
//           lane), sums it per column and writes the result to partial[n][chunk][col];
//   pass 2 (column_finish, also used by kernels that write their own per-block partials, e.g. norm.cu): a block per
//           tile of kColTile columns; lane y of a column adds the chunks y, y + kFinishLanes, ... in order, then the
//           kFinishLanes sums are added in a fixed pairwise tree and the total added into the output.
// Every addition's order depends on (rows, cols) alone, so repeated runs give bit-identical results.
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace vlm::ops::cuda {

constexpr int kColTile = 32;           // columns per block: one warp wide, so global reads are coalesced
constexpr int kRowLanes = 8;           // blockDim.y: rows summed in parallel within a chunk
constexpr int64_t kMinRowChunk = 128;  // rows per chunk (more when rows would need over 65535 chunks)

// Rows per chunk of pass 1 for `rows` rows: kMinRowChunk, or more where that would need over 65535 chunks (gridDim.y).
inline int64_t column_row_chunk(int64_t rows) { return std::max(kMinRowChunk, ceil_div(rows, int64_t{65535})); }

// F: __device__ void operator()(int64_t row, int64_t col, float (&v)[N]) const — the N values of one element.
template <int N, class F>
__global__ void column_partials_kernel(float* __restrict__ partial, int64_t rows, int64_t cols, int64_t row_chunk,
                                       F f) {
  pdl::grid_begin();
  __shared__ float tile[N][kRowLanes][kColTile + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t r0 = chunk * row_chunk, r1 = min(rows, r0 + row_chunk);
  float acc[N];
#pragma unroll
  for (int n = 0; n < N; ++n) acc[n] = 0.f;
  if (c < cols) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      float v[N];
      f(r, c, v);
#pragma unroll
      for (int n = 0; n < N; ++n) acc[n] += v[n];
    }
  }
#pragma unroll
  for (int n = 0; n < N; ++n) tile[n][threadIdx.y][threadIdx.x] = acc[n];
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
#pragma unroll
    for (int n = 0; n < N; ++n) {
      float s = 0.f;
      for (int y = 0; y < kRowLanes; ++y) s += tile[n][y][threadIdx.x];
      partial[(n * chunks + chunk) * cols + c] = s;
    }
  }
}

template <int N>
struct ColumnOutputs {
  float* out[N];  // each may be null (not needed)
};

constexpr int kFinishLanes = 32;  // blockDim.y of pass 2: chunk partials summed in parallel per column

// outs.out[n][c] += sum over ch < chunks of partial[(n * chunks + ch) * cols + c].
template <int N>
__global__ void __launch_bounds__(kColTile * kFinishLanes)
    column_finish_kernel(ColumnOutputs<N> outs, const float* __restrict__ partial, int64_t chunks, int64_t cols) {
  pdl::grid_begin();
  __shared__ float tile[kFinishLanes][kColTile + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    if (outs.out[n] == nullptr) continue;  // the same for the whole block: the barriers below stay uniform
    float s = 0.f;
    if (c < cols) {
      // Loads in groups of 8 before their adds (a fixed order still): the kernel is a chain of dependent global
      // loads otherwise, ~5 us for a 256-chunk partial where one round trip's latency should be the floor.
      const float* src = partial + n * chunks * cols + c;
      int64_t ch = threadIdx.y;
      for (; ch + 7 * kFinishLanes < chunks; ch += 8 * kFinishLanes) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = src[(ch + u * kFinishLanes) * cols];
#pragma unroll
        for (int u = 0; u < 8; ++u) s += v[u];
      }
      for (; ch < chunks; ch += kFinishLanes) s += src[ch * cols];
    }
    tile[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    // The kFinishLanes sums of a column, added pairwise in a fixed tree (lanes y and y + half, half = 16, 8, ..., 1).
    for (int half = kFinishLanes / 2; half > 0; half /= 2) {
      if (threadIdx.y < half) tile[threadIdx.y][threadIdx.x] += tile[threadIdx.y + half][threadIdx.x];
      __syncthreads();
    }
    if (threadIdx.y == 0 && c < cols) outs.out[n][c] += tile[0][threadIdx.x];
    __syncthreads();  // the tile is rewritten for the next output
  }
}

// Pass 2 on `stream`: partial holds N x chunks x cols f32 sums (chunks > 0, cols > 0).
template <int N>
void column_finish(ColumnOutputs<N> outs, const float* partial, int64_t chunks, int64_t cols, cudaStream_t stream) {
  pdl::launch(column_finish_kernel<N>, static_cast<unsigned>(ceil_div(cols, kColTile)), dim3(kColTile, kFinishLanes), 0,
              stream, outs, partial, chunks, cols);
  VLM_CUDA_CHECK_LAUNCH();
}

// outs.out[n][c] += sum_{r < rows} value_n(r, c) for every column c < cols, on `device`'s current stream.
template <int N, class F>
void column_reduce(ColumnOutputs<N> outs, int64_t rows, int64_t cols, Device device, F f) {
  if (rows == 0 || cols == 0) return;
  bool any = false;
  for (int n = 0; n < N; ++n) any = any || outs.out[n] != nullptr;
  if (!any) return;
  const int64_t row_chunk = column_row_chunk(rows), chunks = ceil_div(rows, row_chunk);
  Tensor partial = scratch(Shape{N * chunks * cols}, DType::f32, device);
  cudaStream_t stream = stream_of(device);
  const dim3 grid(static_cast<unsigned>(ceil_div(cols, kColTile)), static_cast<unsigned>(chunks));
  pdl::launch(column_partials_kernel<N, F>, grid, dim3(kColTile, kRowLanes), 0, stream, ptr<float>(partial), rows, cols,
              row_chunk, f);
  VLM_CUDA_CHECK_LAUNCH();
  column_finish<N>(outs, ptr<float>(partial), chunks, cols, stream);
}

}  // namespace vlm::ops::cuda
