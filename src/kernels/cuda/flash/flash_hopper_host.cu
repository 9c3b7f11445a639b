// Host helpers of the Hopper kernels (see flash_hopper_host.h). The tensor-map encoder comes from the driver through
// the runtime's entry-point query, so nothing links libcuda directly.
#include "kernels/cuda/flash/flash_hopper_host.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "core/cuda_check.h"
#include "core/env.h"

namespace vlm::flash {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    VLM_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    VLM_CHECK(q == cudaDriverEntryPointSuccess && f, "cuTensorMapEncodeTiled is not available from the driver");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace

namespace {

// [rows, heads, d] with element strides; boxes of box_cols x 1 head x box_rows, 128-byte swizzle in shared memory.
CUtensorMap encode_rows_heads_cols(CUtensorMapDataType type, int elem_bytes, const void* base, int64_t rows, int heads,
                                   int d, int64_t row_stride, int64_t head_stride, int box_cols, int box_rows) {
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(d), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(head_stride) * elem_bytes,
                                 static_cast<cuuint64_t>(row_stride) * elem_bytes};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(box_cols), 1, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  CUtensorMap map;
  const CUresult r = tensor_map_encoder()(&map, type, 3, const_cast<void*>(base), dims, strides, box, elem_strides,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  VLM_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (", static_cast<int>(r), ")");
  return map;
}

}  // namespace

CUtensorMap make_tensor_map(const void* base, int64_t rows, int heads, int d, int64_t row_stride, int64_t head_stride,
                            int box_rows) {
  return encode_rows_heads_cols(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, rows, heads, d, row_stride, head_stride,
                                64, box_rows);
}

CUtensorMap make_f32_reduce_map(float* base, int64_t rows, int heads, int d, int box_rows) {
  return encode_rows_heads_cols(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, base, rows, heads, d,
                                static_cast<int64_t>(heads) * d, d, 32, box_rows);
}

CUtensorMap make_f32_stats_map(const float* base, int64_t rows, int heads, int64_t head_stride, int box_rows) {
  VLM_CHECK(head_stride % 4 == 0, "make_f32_stats_map: the head stride must be a multiple of 4 floats");
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(rows), static_cast<cuuint64_t>(heads)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(head_stride) * 4};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t elem_strides[2] = {1, 1};
  CUtensorMap map;
  const CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, const_cast<float*>(base), dims,
                                          strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  VLM_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (", static_cast<int>(r), ")");
  return map;
}

int sm_count() {
  int dev = 0;
  VLM_CUDA_CHECK(cudaGetDevice(&dev));
  thread_local int cached_dev = -1, cached = 0;
  if (dev != cached_dev) {
    VLM_CUDA_CHECK(cudaDeviceGetAttribute(&cached, cudaDevAttrMultiProcessorCount, dev));
    cached_dev = dev;
  }
  return cached;
}

bool flash_persistent(bool automatic) {
  static const std::optional<int> forced = env::integer_if_set("VLM_FLASH_PERSISTENT");
  return forced ? *forced == 1 : automatic;
}

bool flash_wide_keys(bool automatic) {
  static const std::optional<int> forced = env::integer_if_set("VLM_FLASH_WIDE_KEYS");
  return forced ? *forced == 1 : automatic;
}

bool flash_dynamic(bool automatic) {
  static const std::optional<int> forced = env::integer_if_set("VLM_FLASH_DYNAMIC");
  return forced ? *forced == 1 : automatic;
}

bool flash_fwd_rows64(bool automatic) {
  static const std::optional<int> forced = env::integer_if_set("VLM_FLASH_FWD_ROWS64");
  return forced ? *forced == 1 : automatic;
}

bool flash_causal_wide(bool automatic) {
  static const std::optional<int> forced = env::integer_if_set("VLM_FLASH_CAUSAL_WIDE");
  return forced ? *forced == 1 : automatic;
}

int flash_causal_group(int automatic) {
  static const std::optional<int> forced = env::integer_if_set("VLM_FLASH_CAUSAL_GROUP");
  return forced ? *forced : automatic;
}

int* flash_tile_counter(cudaStream_t stream) {
  int dev = 0;
  VLM_CUDA_CHECK(cudaGetDevice(&dev));
  static std::mutex mu;
  static std::map<std::pair<int, cudaStream_t>, int*> counters;  // kept for the process
  std::lock_guard<std::mutex> lock(mu);
  int*& counter = counters[{dev, stream}];
  if (counter == nullptr) {
    VLM_CUDA_CHECK(cudaMalloc(&counter, 2 * sizeof(int)));
    VLM_CUDA_CHECK(cudaMemset(counter, 0, 2 * sizeof(int)));  // synchronous: in place before any launch uses it
  }
  return counter;
}

bool device_is_sm90() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  thread_local int cached_dev = -1, cached = 0;
  if (dev != cached_dev) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cached = major == 9 && minor == 0;
    cached_dev = dev;
  }
  return cached != 0;
}

}  // namespace vlm::flash
