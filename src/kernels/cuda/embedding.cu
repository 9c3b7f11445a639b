// Row lookups on CUDA: embedding forward (a gather) and its deterministic backward, scatter_rows and gather_rows.
// Bad indices cannot abort on the device: the kernels record the first one (cuda_context.h) and poison what it
// would have produced with NaN (gathered rows); scatter_rows and embedding_backward skip the row and record it.
//
// embedding_backward, sort-based and deterministic (bit-identical run to run, and to the CPU reference):
//  1. keys: key[t] = ids[t], or `vocab` for a bad id (recorded), so bad tokens sort last as one run and are skipped;
//     a stable CUB radix sort of (key, t) over the bits `vocab` needs groups the tokens by id, in token order.
//  2. A run (the tokens of one id) of up to kShortRunMax tokens is summed by one warp per 32 of its 16-byte column
//     vectors: each lane sums its vector over the run's rows in token order, then adds it (+=) to dtable once.
//     Longer runs (a padding id repeated thousands of times) are queued for step 3, with their ends in run_end.
//  3. A long run is split into 32-byte column slices, one block each: the block stages kChunkRows rows of its slice
//     in shared memory (all threads loading, the next chunk in flight in registers), and one thread per column sums
//     the staged rows in token order. The serial chain per column is a shared-memory add per row, not a DRAM load.
// So every dtable element is summed by one thread, in token order, from 0.f, and added to dtable once. (The order
// the queue of long runs fills in does not matter: each run's elements have one owner.)
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <climits>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace vlm::ops::cuda {

namespace {

constexpr int kRowThreads = 128;  // threads of a row copy

// embedding_backward
constexpr int kKeyThreads = 256;             // threads of the sort-key kernel
constexpr int kRunWarps = 8;                 // sorted positions (one warp each) per block of the short-run kernel
constexpr int kShortRunMax = 32;             // longest run summed by a warp: one ballot over the next 32 keys
constexpr int kShortLoads = 8;               // dout rows in flight per lane in the short-run kernel
constexpr int kLongThreads = 128;            // threads of a long-run block
constexpr int kSliceVecs = 2;                // 16-byte vectors per row of a long-run column slice: 32 B, a sector
constexpr int kChunkRows = 512;              // rows of the slice staged per step: 16 KB of shared memory
constexpr int kLongLoads = kChunkRows * kSliceVecs / kLongThreads;  // 16-byte loads in flight per thread
constexpr int64_t kLongBlocks = 4096;        // about two waves of long-run blocks; more runs loop
static_assert(kChunkRows * kSliceVecs % kLongThreads == 0, "a chunk is whole loads of every thread");

// out[i, :] = src[index[i], :]; a bad index gives a NaN row and is recorded.
template <class T>
__global__ void gather_rows_kernel(T* __restrict__ out, const T* __restrict__ src, const int32_t* __restrict__ index,
                                   int64_t src_rows, int64_t cols, IndexErrorRecord* rec, IndexErrorOp op) {
  pdl::grid_begin();
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
  pdl::grid_begin();
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
  pdl::grid_begin();
  VLM_GRID_STRIDE_LOOP(i, n) {
    const int32_t id = index[i];
    if (id >= 0 && id < out_rows && atomicAdd(&counts[id], 1) != 0)
      record_index_error(rec, IndexErrorOp::scatter_rows, i, id, out_rows);
  }
}

// The raw bits of one element, for packing into a 16-byte vector.
__device__ __forceinline__ uint32_t bits_of(float x) { return __float_as_uint(x); }
__device__ __forceinline__ uint32_t bits_of(bf16 x) { return __bfloat16_as_ushort(x); }

// The kVec16<T> elements of row[c0 ...] as a raw 16-byte vector (see unpack_vec16); kVec: one aligned load (cols a
// multiple of kVec16<T>, row 16-byte aligned), else element loads with the columns past `cols` as 0.
template <class T, bool kVec>
__device__ __forceinline__ uint4 load_cols16(const T* row, int64_t c0, int64_t cols) {
  if constexpr (kVec) {
    return load_raw16(row + c0);
  } else {
    constexpr int kPerWord = 4 / static_cast<int>(sizeof(T));
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int e = 0; e < kVec16<T>; ++e)
      if (c0 + e < cols) w[e / kPerWord] |= bits_of(row[c0 + e]) << (32 / kPerWord * (e % kPerWord));
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// row[c0 + k] += acc[k] for the columns below `cols` (kVec: cols is a multiple of kV, so all of them, 16 B at a time).
template <bool kVec, int kV>
__device__ __forceinline__ void add_cols(float* row, int64_t c0, int64_t cols, const float (&acc)[kV]) {
  if constexpr (kVec) {
#pragma unroll
    for (int q = 0; q < kV; q += 4) {
      float4* p = reinterpret_cast<float4*>(row + c0 + q);
      float4 v = *p;
      v.x += acc[q];
      v.y += acc[q + 1];
      v.z += acc[q + 2];
      v.w += acc[q + 3];
      *p = v;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kV; ++k)
      if (c0 + k < cols) row[c0 + k] += acc[k];
  }
}

// keys[t] = ids[t] in [0, vocab), else vocab (recorded; sorts last and is skipped); order[t] = t.
__global__ void embedding_sort_keys_kernel(uint32_t* __restrict__ keys, int32_t* __restrict__ order,
                                           const int32_t* __restrict__ ids, int64_t tokens, int64_t vocab,
                                           IndexErrorRecord* rec) {
  pdl::grid_begin();
  VLM_GRID_STRIDE_LOOP(t, tokens) {
    const int32_t id = ids[t];
    const bool bad = id < 0 || id >= vocab;
    if (bad) record_index_error(rec, IndexErrorOp::embedding_backward, t, id, vocab);
    keys[t] = static_cast<uint32_t>(bad ? vocab : id);
    order[t] = static_cast<int32_t>(t);
  }
}

// Runs of at most kShortRunMax tokens. Warp w of block (x, y) looks at sorted position i = x * kRunWarps + w and,
// when a run starts there, sums column vectors [32 y, 32 y + 32) of the run's rows (lane = vector) in token order
// and adds them to dtable. A longer run is queued in long_runs (the y = 0 warp appends its start); the warp where
// a run ends writes run_end[id] (read by the long-run kernel).
//   keys, order: [tokens] the sorted keys and their token indices; dout: [tokens, cols]; dtable: [vocab, cols];
//   run_end: [vocab]; long_runs: [1 + max long runs] = {count, starts...}, count zeroed before the launch.
template <class T, bool kVec>
__global__ void __launch_bounds__(kRunWarps * 32) embedding_backward_runs_kernel(
    float* __restrict__ dtable, const T* __restrict__ dout, const uint32_t* __restrict__ keys,
    const int32_t* __restrict__ order, int64_t tokens, int64_t vocab, int64_t cols, int32_t* __restrict__ run_end,
    int32_t* __restrict__ long_runs) {
  pdl::grid_begin();
  constexpr int kV = kVec16<T>;
  const int lane = threadIdx.x & 31;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRunWarps + (threadIdx.x >> 5);
  if (i >= tokens) return;
  const uint32_t key = keys[i];
  if (key >= vocab) return;  // bad ids
  const bool first_slice = blockIdx.y == 0;
  if (first_slice && lane == 0 && (i + 1 == tokens || keys[i + 1] != key)) run_end[key] = static_cast<int32_t>(i + 1);
  if (i > 0 && keys[i - 1] == key) return;  // inside a run
  const int64_t next = i + 1 + lane;
  const unsigned same = __ballot_sync(0xffffffffu, next < tokens && keys[next] == key);
  if (same == 0xffffffffu) {  // more than kShortRunMax tokens
    if (first_slice && lane == 0) long_runs[1 + atomicAdd(long_runs, 1)] = static_cast<int32_t>(i);
    return;
  }
  const int len = 1 + __popc(same);  // the keys are sorted: the equal ones are lanes [0, len - 1)
  const int32_t my_token = lane < len ? order[i + lane] : 0;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.y) * 32 + lane) * kV;
  const bool active = c0 < cols;
  float acc[kV] = {};
  for (int r0 = 0; r0 < len; r0 += kShortLoads) {
    uint4 raw[kShortLoads];
#pragma unroll
    for (int g = 0; g < kShortLoads; ++g) {  // all loads first, then the adds in token order
      const int64_t t = __shfl_sync(0xffffffffu, my_token, (r0 + g) & 31);
      raw[g] = active && r0 + g < len ? load_cols16<T, kVec>(dout + t * cols, c0, cols) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int g = 0; g < kShortLoads; ++g) {
      float v[kV];
      unpack_vec16<T>(raw[g], v);
#pragma unroll
      for (int k = 0; k < kV; ++k)
        if (r0 + g < len) acc[k] += v[k];
    }
  }
  if (active) add_cols<kVec>(dtable + static_cast<int64_t>(key) * cols, c0, cols, acc);
}

// Runs of more than kShortRunMax tokens: block (x, y) sums column slice x (kSliceVecs 16-byte vectors) of the queued
// runs y, y + gridDim.y, ... Per chunk of kChunkRows rows all threads stage the slice in shared memory (the next
// chunk's loads in flight in registers meanwhile), then thread j < slice columns adds column j of the staged rows in
// token order. Arguments as for embedding_backward_runs_kernel.
template <class T, bool kVec>
__global__ void __launch_bounds__(kLongThreads) embedding_backward_long_runs_kernel(
    float* __restrict__ dtable, const T* __restrict__ dout, const uint32_t* __restrict__ keys,
    const int32_t* __restrict__ order, int64_t cols, const int32_t* __restrict__ run_end,
    const int32_t* __restrict__ long_runs) {
  pdl::grid_begin();
  constexpr int kV = kVec16<T>, kSliceCols = kSliceVecs * kV;
  __shared__ uint4 tile[kChunkRows * kSliceVecs];  // row r of the slice: tile[r * kSliceVecs ...], kSliceCols T
  const int tid = threadIdx.x;
  const int64_t s0 = static_cast<int64_t>(blockIdx.x) * kSliceCols;  // first column of the slice
  const int runs = long_runs[0];
  for (int j = blockIdx.y; j < runs; j += gridDim.y) {
    const int64_t start = long_runs[1 + j];
    const uint32_t key = keys[start];
    const int64_t len = run_end[key] - start;
    uint4 raw[kLongLoads];  // load u of this thread: vector q = tid + u * kLongThreads of the chunk
    auto load_chunk = [&](int64_t r0) {
#pragma unroll
      for (int u = 0; u < kLongLoads; ++u) {
        const int q = tid + u * kLongThreads;
        const int64_t r = r0 + q / kSliceVecs, c0 = s0 + (q % kSliceVecs) * kV;
        raw[u] = make_uint4(0, 0, 0, 0);
        if (r < len && c0 < cols) raw[u] = load_cols16<T, kVec>(dout + order[start + r] * cols, c0, cols);
      }
    };
    load_chunk(0);
    float acc = 0.f;
    for (int64_t r0 = 0; r0 < len; r0 += kChunkRows) {
      __syncthreads();  // the previous chunk (of this run or the last) is summed
#pragma unroll
      for (int u = 0; u < kLongLoads; ++u) tile[tid + u * kLongThreads] = raw[u];
      __syncthreads();
      if (r0 + kChunkRows < len) load_chunk(r0 + kChunkRows);
      if (tid < kSliceCols) {
        const T* col = reinterpret_cast<const T*>(tile) + tid;
        const int rows = static_cast<int>(min(static_cast<int64_t>(kChunkRows), len - r0));
        for (int r = 0; r < rows; ++r) acc += to_f32(col[r * kSliceCols]);
      }
    }
    if (tid < kSliceCols && s0 + tid < cols) dtable[static_cast<int64_t>(key) * cols + s0 + tid] += acc;
  }
}

void launch_gather(Tensor& out, const Tensor& src, const Tensor& index, IndexErrorOp op, const char* name) {
  const int64_t n = out.dim(0), cols = out.dim(1);
  if (n == 0) return;
  const Device dev = out.device();
  DeviceGuard guard(dev);
  IndexErrorRecord* rec = index_error_record(dev);
  dispatch_float(out.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    pdl::launch(gather_rows_kernel<T>, static_cast<unsigned>(n), kRowThreads, 0, stream_of(dev), ptr<T>(out),
                ptr<T>(src), ptr<int32_t>(index), src.dim(0), cols, rec, op);
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

// dtable: [vocab, cols] f32, += the sums; dout: [tokens, cols] f32 or bf16; ids: [tokens] i32.
void embedding_backward(Tensor& dtable, const Tensor& dout, const Tensor& ids) {
  const int64_t tokens = dout.dim(0), vocab = dtable.dim(0), cols = dtable.dim(1);
  if (tokens == 0) return;
  VLM_CHECK(tokens <= INT32_MAX && vocab <= INT32_MAX, "ops::embedding_backward: ", tokens, " tokens or ", vocab,
            " ids exceed the i32 sort");
  const Device dev = dtable.device();
  DeviceGuard guard(dev);
  IndexErrorRecord* rec = index_error_record(dev);
  cudaStream_t stream = stream_of(dev);
  const int n = static_cast<int>(tokens);

  // 1. Keys (bad ids -> vocab) and their stable sort: sorted[0] / order[0] in, sorted[1] / order[1] out.
  Tensor sorted = scratch(Shape{2, tokens}, DType::i32, dev), order = scratch(Shape{2, tokens}, DType::i32, dev);
  uint32_t* keys_in = ptr<uint32_t>(sorted);
  uint32_t* keys = keys_in + tokens;
  int32_t* order_in = ptr<int32_t>(order);
  int32_t* order_out = order_in + tokens;
  pdl::launch(embedding_sort_keys_kernel, grid_for(tokens, kKeyThreads), kKeyThreads, 0, stream, keys_in, order_in,
              ptr<int32_t>(ids), tokens, vocab, rec);
  VLM_CUDA_CHECK_LAUNCH();
  if (vocab == 0 || cols == 0) {  // nothing to add; the ids are still checked
    check_index_errors_now("embedding_backward", dev);
    return;
  }
  int end_bit = 0;  // the keys are in [0, vocab]
  while ((int64_t{1} << end_bit) <= vocab) ++end_bit;
  size_t temp_bytes = 0;
  VLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys, order_in, order_out, n, 0,
                                                 end_bit, stream));
  Tensor temp = scratch(Shape{static_cast<int64_t>(std::max<size_t>(temp_bytes, 1))}, DType::u8, dev);
  VLM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw_data(), temp_bytes, keys_in, keys, order_in, order_out, n,
                                                 0, end_bit, stream));

  // 2. Short runs, queueing the long ones; 3. the long runs.
  const int64_t max_long = tokens / (kShortRunMax + 1);
  Tensor run_end = scratch(Shape{vocab}, DType::i32, dev), long_runs = scratch(Shape{1 + max_long}, DType::i32, dev);
  VLM_CUDA_CHECK(cudaMemsetAsync(long_runs.raw_data(), 0, sizeof(int32_t), stream));
  dispatch_float(dout.dtype(), "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    constexpr int kV = kVec16<T>;
    const int64_t col_groups = ceil_div(ceil_div(cols, kV), 32);
    VLM_CHECK(col_groups <= 65535, "ops::embedding_backward: ", cols, " columns exceed the CUDA grid");
    const bool vec = cols % kV == 0 && all_aligned16(ptr<T>(dout), ptr<float>(dtable));
    auto launch = [&](auto vec_tag) {
      constexpr bool kVec = decltype(vec_tag)::value;
      const dim3 grid(static_cast<unsigned>(ceil_div(tokens, kRunWarps)), static_cast<unsigned>(col_groups));
      pdl::launch(embedding_backward_runs_kernel<T, kVec>, grid, kRunWarps * 32, 0, stream, ptr<float>(dtable),
                  ptr<T>(dout), keys, order_out, tokens, vocab, cols, ptr<int32_t>(run_end), ptr<int32_t>(long_runs));
      VLM_CUDA_CHECK_LAUNCH();
      if (max_long == 0) return;
      const int64_t slices = ceil_div(cols, kSliceVecs * kV);
      const dim3 long_grid(static_cast<unsigned>(slices),
                           static_cast<unsigned>(std::clamp<int64_t>(ceil_div(kLongBlocks, slices), 1,
                                                                     std::min<int64_t>(max_long, 65535))));
      pdl::launch(embedding_backward_long_runs_kernel<T, kVec>, long_grid, kLongThreads, 0, stream, ptr<float>(dtable),
                  ptr<T>(dout), keys, order_out, cols, ptr<int32_t>(run_end), ptr<int32_t>(long_runs));
      VLM_CUDA_CHECK_LAUNCH();
    };
    if (vec)
      launch(std::true_type{});
    else
      launch(std::false_type{});
  });
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
  pdl::launch(count_scatter_targets_kernel, grid_for(n, 256), 256, 0, stream, ptr<int32_t>(counts), ptr<int32_t>(index),
              n, out_rows, rec);
  VLM_CUDA_CHECK_LAUNCH();
  dispatch_float(out.dtype(), "scatter_rows", [&](auto tag) {
    using T = decltype(tag);
    pdl::launch(scatter_rows_kernel<T>, static_cast<unsigned>(n), kRowThreads, 0, stream, ptr<T>(out), ptr<T>(src),
                ptr<int32_t>(index), out_rows, cols, rec);
  });
  VLM_CUDA_CHECK_LAUNCH();
  check_index_errors_now("scatter_rows", dev);
}

}  // namespace vlm::ops::cuda
