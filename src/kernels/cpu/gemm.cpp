// GEMM through OpenBLAS (row-major cblas_sgemm) and the linear layer built on it.
#include <cblas.h>

#include <algorithm>
#include <climits>

#include "core/status.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"

namespace vlm::ops::cpu {

namespace {

// Columns per task when summing over rows: each task owns its columns and sums the rows in order.
constexpr int64_t kColumnBlock = 256;

blasint to_blas(int64_t x) {
  VLM_CHECK(x >= 0 && x <= INT_MAX, "gemm: dimension ", x, " does not fit OpenBLAS's 32-bit integers");
  return static_cast<blasint>(x);
}

}  // namespace

void gemm(float* c, const float* a, const float* b, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b,
          float alpha, float beta) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // op(a) @ op(b) is all zeros: c = beta * c (beta == 0 overwrites, as BLAS does).
    for (int64_t i = 0; i < m * n; ++i) c[i] = beta == 0.f ? 0.f : beta * c[i];
    return;
  }
  const blasint lda = to_blas(trans_a ? m : k), ldb = to_blas(trans_b ? k : n);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, to_blas(m),
              to_blas(n), to_blas(k), alpha, a, lda, b, ldb, beta, c, to_blas(n));
}

void gemm_batched(float* c, const float* a, const float* b, int64_t batch, int64_t m, int64_t n, int64_t k,
                  bool trans_a, bool trans_b, float alpha, float beta) {
  // One call per entry: OpenBLAS threads each GEMM internally, so a batch loop keeps the cores busy already.
  for (int64_t i = 0; i < batch; ++i)
    gemm(c + i * m * n, a + i * m * k, b + i * k * n, m, n, k, trans_a, trans_b, alpha, beta);
}

void linear_forward(float* y, const float* x, const float* w, const float* bias, int64_t rows, int64_t in,
                    int64_t out) {
  gemm(y, x, w, rows, out, in, /*trans_a=*/false, /*trans_b=*/true, 1.f, 0.f);
  if (bias == nullptr) return;
#pragma omp parallel for schedule(static) if (rows * out >= kParallelMinWork)
  for (int64_t t = 0; t < rows; ++t) {
    float* yt = y + t * out;
    for (int64_t o = 0; o < out; ++o) yt[o] += bias[o];
  }
}

void linear_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w, int64_t rows,
                     int64_t in, int64_t out) {
  if (dx != nullptr) gemm(dx, dy, w, rows, in, out, false, false, 1.f, 0.f);  // [rows, out] @ [out, in]
  if (dw != nullptr) gemm(dw, dy, x, out, in, rows, true, false, 1.f, 1.f);   // [out, rows] @ [rows, in]
  if (db == nullptr) return;
  const int64_t blocks = (out + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (rows * out >= kParallelMinWork)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kColumnBlock, width = std::min(kColumnBlock, out - c0);
    float acc[kColumnBlock] = {};
    for (int64_t t = 0; t < rows; ++t) {
      const float* dyt = dy + t * out + c0;
      for (int64_t c = 0; c < width; ++c) acc[c] += dyt[c];
    }
    for (int64_t c = 0; c < width; ++c) db[c0 + c] += acc[c];
  }
}

}  // namespace vlm::ops::cpu
