// Column sums added into an f32 vector (the bias gradient of linear_backward), deterministic (column_reduce.cuh).
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

}  // namespace

void column_sums_accumulate(Tensor& out, const Tensor& in, int64_t rows, int64_t cols) {
  const Device dev = out.device();
  DeviceGuard guard(dev);
  dispatch_float(in.dtype(), "column_sums", [&](auto tag) {
    using T = decltype(tag);
    column_reduce<1>(ColumnOutputs<1>{{ptr<float>(out)}}, rows, cols, dev, ColumnValue<T>{ptr<T>(in), cols});
  });
}

}  // namespace vlm::ops::cuda
