// Row lookups: token embeddings (forward gather, backward scatter-add) and row scatter/gather by index.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"

namespace vlm::ops::cpu {

namespace {

void check_indices(const char* op, const char* name, const int32_t* index, int64_t n, int64_t rows) {
  for (int64_t i = 0; i < n; ++i)
    VLM_CHECK(index[i] >= 0 && index[i] < rows, "ops::", op, ": ", name, "[", i, "] = ", index[i], " is outside [0, ",
              rows, ")");
}

void copy_row(float* dst, const float* src, int64_t cols) {
  std::memcpy(dst, src, static_cast<size_t>(cols) * sizeof(float));
}

}  // namespace

void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t tokens, int64_t vocab,
                       int64_t cols) {
  check_indices("embedding_forward", "ids", ids, tokens, vocab);
#pragma omp parallel for schedule(static) if (tokens * cols >= kParallelMinWork)
  for (int64_t t = 0; t < tokens; ++t) copy_row(out + t * cols, table + ids[t] * cols, cols);
}

void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t tokens, int64_t vocab,
                        int64_t cols) {
  check_indices("embedding_backward", "ids", ids, tokens, vocab);
  // Group the tokens by id (sorted by (id, token)), then one task per distinct id sums its rows in token order
  // and adds the sum to dtable once: every dtable row is written by one thread, in an order fixed by `ids`.
  std::vector<std::pair<int32_t, int32_t>> by_id(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) by_id[static_cast<size_t>(t)] = {ids[t], static_cast<int32_t>(t)};
  std::sort(by_id.begin(), by_id.end());
  std::vector<int64_t> group_start;  // start of each run of equal ids in by_id, plus the end
  for (int64_t i = 0; i < tokens; ++i)
    if (i == 0 || by_id[static_cast<size_t>(i)].first != by_id[static_cast<size_t>(i - 1)].first)
      group_start.push_back(i);
  group_start.push_back(tokens);
  const int64_t groups = static_cast<int64_t>(group_start.size()) - 1;
#pragma omp parallel if (tokens * cols >= kParallelMinWork)
  {
    std::vector<float> acc(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = group_start[static_cast<size_t>(g)], end = group_start[static_cast<size_t>(g + 1)];
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t i = begin; i < end; ++i)
        axpy(acc.data(), dout + by_id[static_cast<size_t>(i)].second * cols, 1.f, cols);
      float* dst = dtable + static_cast<int64_t>(by_id[static_cast<size_t>(begin)].first) * cols;
      for (int64_t c = 0; c < cols; ++c) dst[c] += acc[static_cast<size_t>(c)];
    }
  }
}

void scatter_rows(float* out, const float* src, const int32_t* index, int64_t n, int64_t out_rows, int64_t cols) {
  check_indices("scatter_rows", "index", index, n, out_rows);
  std::vector<char> seen(static_cast<size_t>(out_rows), 0);
  for (int64_t i = 0; i < n; ++i) {
    char& s = seen[static_cast<size_t>(index[i])];
    VLM_CHECK(!s, "ops::scatter_rows: index[", i, "] = ", index[i], " repeats an earlier index (must be distinct)");
    s = 1;
  }
#pragma omp parallel for schedule(static) if (n * cols >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) copy_row(out + index[i] * cols, src + i * cols, cols);
}

void gather_rows(float* out, const float* src, const int32_t* index, int64_t n, int64_t src_rows, int64_t cols) {
  check_indices("gather_rows", "index", index, n, src_rows);
#pragma omp parallel for schedule(static) if (n * cols >= kParallelMinWork)
  for (int64_t i = 0; i < n; ++i) copy_row(out + i * cols, src + index[i] * cols, cols);
}

}  // namespace vlm::ops::cpu
