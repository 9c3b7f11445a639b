// The embedding family's op boundary: the token embedding (a row gather by id) and its scatter-add backward, and the
// plain row moves scatter_rows and gather_rows. Each op validates, then dispatches to cuda/embedding.cu or the CPU
// reference in cpu/embedding.cpp.
#include "kernels/ops.h"

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops/check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops/check.h

namespace {
// table-like [R, C] (`table_dtype`) and rows-like [N, C] (the compute dtype) with an i32 index [N].
void check_rows_pair(const char* op, const char* table_name, const Tensor& table, DType table_dtype,
                     const char* rows_name, const Tensor& rows, const char* index_name, const Tensor& index,
                     Device dev) {
  check_tensor(op, table_name, table, table_dtype, dev);
  check_tensor(op, rows_name, rows, compute_dtype(op, rows_name, rows), dev);
  check_ndim(op, table_name, table, 2);
  check_ndim(op, rows_name, rows, 2);
  VLM_CHECK(table.dim(1) == rows.dim(1), "ops::", op, ": ", table_name, " is ", table.describe(), " but ", rows_name,
            " is ", rows.describe(), " (row widths differ)");
  check_i32_vector(op, index_name, index, dev, rows.dim(0));
}
}  // namespace

void embedding_forward(Tensor& out, const Tensor& table, const Tensor& ids) {
  const char* op = "embedding_forward";
  check_rows_pair(op, "table", table, compute_dtype(op, "out", out), "out", out, "ids", ids, out.device());
  VLM_DISPATCH_CUDA(out.device(), op, cuda::embedding_forward(out, table, ids));
  cpu::embedding_forward(out.data<float>(), table.data<float>(), ids.data<int32_t>(), out.dim(0), table.dim(0),
                         table.dim(1));
}

void embedding_backward(Tensor& dtable, const Tensor& dout, const Tensor& ids) {
  const char* op = "embedding_backward";
  check_rows_pair(op, "dtable", dtable, DType::f32, "dout", dout, "ids", ids, dtable.device());
  VLM_DISPATCH_CUDA(dtable.device(), op, cuda::embedding_backward(dtable, dout, ids));
  cpu::embedding_backward(dtable.data<float>(), dout.data<float>(), ids.data<int32_t>(), dout.dim(0), dtable.dim(0),
                          dtable.dim(1));
}

void scatter_rows(Tensor& out, const Tensor& src, const Tensor& index) {
  const char* op = "scatter_rows";
  check_rows_pair(op, "out", out, compute_dtype(op, "src", src), "src", src, "index", index, out.device());
  VLM_DISPATCH_CUDA(out.device(), op, cuda::scatter_rows(out, src, index));
  cpu::scatter_rows(out.data<float>(), src.data<float>(), index.data<int32_t>(), src.dim(0), out.dim(0), out.dim(1));
}

void gather_rows(Tensor& out, const Tensor& src, const Tensor& index) {
  const char* op = "gather_rows";
  check_rows_pair(op, "src", src, compute_dtype(op, "out", out), "out", out, "index", index, out.device());
  VLM_DISPATCH_CUDA(out.device(), op, cuda::gather_rows(out, src, index));
  cpu::gather_rows(out.data<float>(), src.data<float>(), index.data<int32_t>(), out.dim(0), src.dim(0), src.dim(1));
}

}  // namespace vlm::ops
