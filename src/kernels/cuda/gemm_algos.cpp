// Enumeration of cuBLASLt algorithm configurations for the GEMM autotuner (see gemm_algos.h).
#include "kernels/cuda/gemm_algos.h"

#include <algorithm>

namespace vlm::ops::cuda {

namespace {

// A capability list of `algo` (uint32 entries: tile or stage ids); {fallback} when the algorithm reports none.
std::vector<uint32_t> cap_list(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr,
                               uint32_t fallback) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS || bytes == 0)
    return {fallback};
  std::vector<uint32_t> ids(bytes / sizeof(uint32_t));
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, ids.data(), ids.size() * sizeof(uint32_t), &bytes) !=
          CUBLAS_STATUS_SUCCESS ||
      ids.empty())
    return {fallback};
  return ids;
}

template <class T>
T config_of(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr, T fallback) {
  T v = fallback;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS)
    return fallback;
  return v;
}

template <class T>
bool set_config(cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr, T value) {
  return cublasLtMatmulAlgoConfigSetAttribute(&algo, attr, &value, sizeof(value)) == CUBLAS_STATUS_SUCCESS;
}

}  // namespace

GemmAlgoConfig gemm_algo_config(const cublasLtMatmulAlgo_t& algo) {
  GemmAlgoConfig c;
  c.id = config_of<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID, -1);
  c.tile = config_of<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, 0);
  c.stages = config_of<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, 0);
  c.swizzle = config_of<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, 0);
  c.splitk = config_of<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1);
  return c;
}

std::vector<cublasLtMatmulAlgo_t> enumerate_gemm_algos(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                       cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                                                       cublasLtMatrixLayout_t lc, cudaDataType_t in_type,
                                                       cudaDataType_t out_type, size_t max_workspace, int max_count,
                                                       const std::vector<cublasLtMatmulAlgo_t>& known) {
  std::vector<cublasLtMatmulAlgo_t> out;
  if (max_count <= 0) return out;
  std::vector<GemmAlgoConfig> seen;
  for (const cublasLtMatmulAlgo_t& a : known) seen.push_back(gemm_algo_config(a));
  constexpr int kMaxIds = 256;
  int ids[kMaxIds];
  int n_ids = 0;
  if (cublasLtMatmulAlgoGetIds(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, in_type, in_type, out_type, out_type, kMaxIds,
                               ids, &n_ids) != CUBLAS_STATUS_SUCCESS)
    return out;
  for (int i = 0; i < n_ids && static_cast<int>(out.size()) < max_count; ++i) {
    cublasLtMatmulAlgo_t base;
    if (cublasLtMatmulAlgoInit(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, in_type, in_type, out_type, out_type, ids[i],
                               &base) != CUBLAS_STATUS_SUCCESS)
      continue;
    const std::vector<uint32_t> tiles = cap_list(base, CUBLASLT_ALGO_CAP_TILE_IDS, CUBLASLT_MATMUL_TILE_UNDEFINED);
    const std::vector<uint32_t> stages =
        cap_list(base, CUBLASLT_ALGO_CAP_STAGES_IDS, CUBLASLT_MATMUL_STAGES_UNDEFINED);
    uint32_t swizzle_support = 0;
    size_t written = 0;
    cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swizzle_support,
                                      sizeof(swizzle_support), &written);
    const uint32_t max_swizzle = swizzle_support != 0 ? 1 : 0;
    for (uint32_t tile : tiles)
      for (uint32_t stage : stages)
        for (uint32_t swizzle = 0; swizzle <= max_swizzle; ++swizzle) {
          if (static_cast<int>(out.size()) >= max_count) return out;
          cublasLtMatmulAlgo_t algo = base;
          if (!set_config(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, tile) ||
              !set_config(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, stage) ||
              !set_config(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, swizzle) ||
              !set_config(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, int32_t{1}))
            continue;
          const GemmAlgoConfig c = gemm_algo_config(algo);
          if (std::find(seen.begin(), seen.end(), c) != seen.end()) continue;
          cublasLtMatmulHeuristicResult_t check{};
          if (cublasLtMatmulAlgoCheck(handle, desc, la, lb, lc, lc, &algo, &check) != CUBLAS_STATUS_SUCCESS ||
              check.workspaceSize > max_workspace)
            continue;
          seen.push_back(c);
          out.push_back(algo);
        }
  }
  return out;
}

}  // namespace vlm::ops::cuda
