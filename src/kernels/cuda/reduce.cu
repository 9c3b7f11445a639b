// Column sums added into an f32 vector (the bias gradient of linear_backward), deterministic (column_reduce.cuh).
// Rows of 16-byte multiples take a vectorized first pass (column_sums_vec_kernel: 16-byte loads, a warp reading 512
// contiguous bytes of a row); other shapes the generic column_partials_kernel, element by element.
#include "kernels/cuda/column_reduce.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace vlm::ops::cuda {

namespace {

template <class T>
struct ColumnValue {
  const T* in;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[1]) const { v[0] = to_f32(in[r * cols + c]); }
};

// Pass 1 of a plain column sum for rows of kVec16<T>-column multiples at a 16-byte aligned base: a block owns
// kColTile x kVec16<T> columns (lane x of the warp the kVec16<T> columns from x * kVec16<T>) and row_chunk rows,
// kRowLanes rows in flight (row lane y takes rows y, y + kRowLanes, ... of the chunk, four loads ahead of their adds);
// the kRowLanes sums of a column are then added in order y = 0, 1, ... and written to partial[chunk][col], the layout
// column_finish reads. Every addition's order depends on (rows, cols) alone.
template <class T>
__global__ void __launch_bounds__(kColTile * kRowLanes)
    column_sums_vec_kernel(float* __restrict__ partial, const T* __restrict__ in, int64_t rows, int64_t cols,
                           int64_t row_chunk) {
  pdl::grid_begin();
  constexpr int kV = kVec16<T>, kTileCols = kColTile * kV;
  __shared__ float tile[kRowLanes][kTileCols];
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTileCols;
  const int64_t c = col0 + threadIdx.x * kV;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * row_chunk, r1 = min(rows, r0 + row_chunk);
  float acc[kV];
#pragma unroll
  for (int j = 0; j < kV; ++j) acc[j] = 0.f;
  if (c < cols) {
    const T* src = in + c;
    int64_t r = r0 + threadIdx.y;
    for (; r + 3 * kRowLanes < r1; r += 4 * kRowLanes) {
      uint4 raw[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) raw[u] = load_raw16(src + (r + u * kRowLanes) * cols);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        float v[kV];
        unpack_vec16<T>(raw[u], v);
#pragma unroll
        for (int j = 0; j < kV; ++j) acc[j] += v[j];
      }
    }
    for (; r < r1; r += kRowLanes) {
      float v[kV];
      load_vec16(src + r * cols, v);
#pragma unroll
      for (int j = 0; j < kV; ++j) acc[j] += v[j];
    }
  }
#pragma unroll
  for (int j = 0; j < kV; ++j) tile[threadIdx.y][threadIdx.x * kV + j] = acc[j];
  __syncthreads();
  // Thread i of the block finishes column col0 + i (kColTile * kRowLanes threads cover kTileCols columns, as
  // kTileCols <= 256 for 2-byte types and 128 for f32).
  const int i = threadIdx.y * kColTile + threadIdx.x;
  if (i < kTileCols && col0 + i < cols) {
    float s = 0.f;
    for (int y = 0; y < kRowLanes; ++y) s += tile[y][i];
    partial[chunk * cols + col0 + i] = s;
  }
}

}  // namespace

void column_sums_accumulate(Tensor& out, const Tensor& in, int64_t rows, int64_t cols) {
  const Device dev = out.device();
  DeviceGuard guard(dev);
  dispatch_float(in.dtype(), "column_sums", [&](auto tag) {
    using T = decltype(tag);
    if (rows == 0 || cols == 0) return;
    if (cols % kVec16<T> == 0 && all_aligned16(ptr<T>(in))) {
      static_assert(kColTile * kVec16<T> <= kColTile * kRowLanes, "a tile's columns must fit the block's threads");
      const int64_t row_chunk = column_row_chunk(rows), chunks = ceil_div(rows, row_chunk);
      Tensor partial = scratch(Shape{chunks * cols}, DType::f32, dev);
      cudaStream_t stream = stream_of(dev);
      const dim3 grid(static_cast<unsigned>(ceil_div(cols, int64_t{kColTile} * kVec16<T>)),
                      static_cast<unsigned>(chunks));
      pdl::launch(column_sums_vec_kernel<T>, grid, dim3(kColTile, kRowLanes), 0, stream, ptr<float>(partial),
                  ptr<T>(in), rows, cols, row_chunk);
      VLM_CUDA_CHECK_LAUNCH();
      column_finish<1>(ColumnOutputs<1>{{ptr<float>(out)}}, ptr<float>(partial), chunks, cols, stream);
      return;
    }
    column_reduce<1>(ColumnOutputs<1>{{ptr<float>(out)}}, rows, cols, dev, ColumnValue<T>{ptr<T>(in), cols});
  });
}

}  // namespace vlm::ops::cuda
