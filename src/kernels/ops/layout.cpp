// The layout family's op boundary: patch extraction from images (the patch-embedding conv as a GEMM input) and the
// pixel shuffle of the projector, forward and backward. Each op validates, then dispatches to cuda/layout.cu or the
// CPU reference in cpu/layout.cpp.
#include "kernels/ops.h"

#include <cmath>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops/check.h"

namespace vlm::ops {

using namespace detail;  // NOLINT: the boundary helpers of ops/check.h

namespace {
// images [B, C, H, W] and patches, both in the compute dtype of images; aborts on mismatch.
void check_patches(const char* op, const char* images_name, const Tensor& images, const char* patches_name,
                   const Tensor& patches, int patch, Device dev) {
  const DType dt = compute_dtype(op, images_name, images);
  check_tensor(op, images_name, images, dt, dev);
  check_ndim(op, images_name, images, 4);
  VLM_CHECK(patch > 0 && images.dim(2) % patch == 0 && images.dim(3) % patch == 0, "ops::", op, ": ", images_name,
            " is ", images.describe(), ", not divisible into ", patch, "x", patch, " patches");
  const int64_t b = images.dim(0), c = images.dim(1), gh = images.dim(2) / patch, gw = images.dim(3) / patch;
  check_like(op, patches_name, patches, dt, dev, Shape{b * gh * gw, c * patch * patch});
}
}  // namespace

void image_to_patches(Tensor& patches, const Tensor& images, int patch) {
  const char* op = "image_to_patches";
  check_patches(op, "images", images, "patches", patches, patch, patches.device());
  VLM_DISPATCH_CUDA(patches.device(), op,
                    cuda::image_to_patches(patches, images, images.dim(1), images.dim(2), images.dim(3), patch, false));
  cpu::image_to_patches(patches.data<float>(), images.data<float>(), images.dim(0), images.dim(1), images.dim(2),
                        images.dim(3), patch);
}

void image_to_patches_backward(Tensor& dimages, const Tensor& dpatches, int patch) {
  const char* op = "image_to_patches_backward";
  check_patches(op, "dimages", dimages, "dpatches", dpatches, patch, dimages.device());
  VLM_DISPATCH_CUDA(dimages.device(), op,
                    cuda::image_to_patches(dimages, dpatches, dimages.dim(1), dimages.dim(2), dimages.dim(3), patch,
                                           true));
  cpu::image_to_patches_backward(dimages.data<float>(), dpatches.data<float>(), dimages.dim(0), dimages.dim(1),
                                 dimages.dim(2), dimages.dim(3), patch);
}

namespace {
// x [B, S*S, C] and y [B, (S/r)^2, C*r*r] in the compute dtype of x; returns S.
int64_t check_pixel_shuffle(const char* op, const char* x_name, const Tensor& x, const char* y_name, const Tensor& y,
                            int factor, Device dev) {
  const DType dt = compute_dtype(op, x_name, x);
  check_tensor(op, x_name, x, dt, dev);
  check_ndim(op, x_name, x, 3);
  const int64_t n = x.dim(1);
  const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n))));
  VLM_CHECK(side * side == n, "ops::", op, ": ", x_name, " is ", x.describe(), ", whose ", n,
            " tokens are not a square grid");
  VLM_CHECK(factor > 0 && side % factor == 0, "ops::", op, ": ", x_name, " is ", x.describe(), ", a ", side, "x", side,
            " grid not divisible by factor ", factor);
  const int64_t out_side = side / factor;
  check_like(op, y_name, y, dt, dev, Shape{x.dim(0), out_side * out_side, x.dim(2) * factor * factor});
  return side;
}
}  // namespace

void pixel_shuffle_forward(Tensor& y, const Tensor& x, int factor) {
  const char* op = "pixel_shuffle_forward";
  const int64_t side = check_pixel_shuffle(op, "x", x, "y", y, factor, y.device());
  VLM_DISPATCH_CUDA(y.device(), op, cuda::pixel_shuffle(y, x, side, x.dim(2), factor, false));
  cpu::pixel_shuffle_forward(y.data<float>(), x.data<float>(), x.dim(0), side, x.dim(2), factor);
}

void pixel_shuffle_backward(Tensor& dx, const Tensor& dy, int factor) {
  const char* op = "pixel_shuffle_backward";
  const int64_t side = check_pixel_shuffle(op, "dx", dx, "dy", dy, factor, dx.device());
  VLM_DISPATCH_CUDA(dx.device(), op, cuda::pixel_shuffle(dx, dy, side, dx.dim(2), factor, true));
  cpu::pixel_shuffle_backward(dx.data<float>(), dy.data<float>(), dx.dim(0), side, dx.dim(2), factor);
}

}  // namespace vlm::ops
