// cuBLASLt algorithm configurations beyond the heuristic's list, for the GEMM autotuner (gemm.cpp). The heuristic
// offers a few configurations per problem; cuBLASLt can run many more: every algorithm id of the data types, each
// with the tile shapes, pipeline stage counts and CTA swizzles it supports (its capabilities). enumerate_gemm_algos
// lists those that cublasLtMatmulAlgoCheck accepts for one problem, without split-K (the heuristic's split-K
// candidates stay in the heuristic's list), so the autotuner can time them (VLM_GEMM_ENUMERATE=1). Why: the text
// model's 576-wide GEMMs run at 341-416 TFLOP/s against 591-665 for the wide ones (2026-12-06, H100), and timing the
// heuristic's top 32 instead of its top 8 found nothing faster.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <vector>

namespace vlm::ops::cuda {

// The configurations of every algorithm id for (in_type x in_type -> out_type, compute 32F, scale 32F) that
// cublasLtMatmulAlgoCheck accepts for the problem of (desc, la, lb, lc) with at most max_workspace bytes of
// workspace, with split-K 1 and the cluster shape left to cuBLASLt; at most max_count of them, in the order of the
// ids and their capability lists. Candidates equal in (id, tile, stages, swizzle) to one of `known` are left out.
std::vector<cublasLtMatmulAlgo_t> enumerate_gemm_algos(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                       cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                                                       cublasLtMatrixLayout_t lc, cudaDataType_t in_type,
                                                       cudaDataType_t out_type, size_t max_workspace, int max_count,
                                                       const std::vector<cublasLtMatmulAlgo_t>& known);

// The (id, tile, stages, swizzle, split-K) of an algorithm, for logs and deduplication.
struct GemmAlgoConfig {
  int id = -1;
  unsigned tile = 0, stages = 0, swizzle = 0;
  int splitk = 1;
  bool operator==(const GemmAlgoConfig&) const = default;
};
GemmAlgoConfig gemm_algo_config(const cublasLtMatmulAlgo_t& algo);

}  // namespace vlm::ops::cuda
