// The activation family on CUDA against the CPU reference: GELU-tanh and SwiGLU forward and backward (also with one
// SwiGLU gradient only), on odd sizes, f32 and bf16.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

const int64_t kSizes[] = {1, 3, 17, 129, 1000, 4099};

// f32 elementwise math on identical inputs: the CUDA and CPU libm functions differ by a few ulp.
constexpr Tolerance kElementwise{2e-6, 1e-7};

TEST(CudaActivation, GeluTanhAndSwigluMatchCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 200;
  for (DType dt : compute_dtypes())
    for (int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " n=" << n);
      const Tensor x = random_normal({n}, seed++, 3.f), up = random_normal({n}, seed++, 2.f);
      const Tensor dy = random_normal({n}, seed++);
      const Tensor xr = rounded(x, dt), upr = rounded(up, dt), dyr = rounded(dy, dt);
      const Tolerance tol = output_tolerance(dt, kElementwise);
      // GELU-tanh: x * (1 + tanh(u)) / 2 cancels for negative x (tanh -> -1), and tanhf carries ~2 ulp, so the f32
      // error is absolute, about |x| * a few eps (x ~ N(0, 3) here): 4e-6 covers |x| <= ~8 at 4 eps.
      const Tolerance gelu_tol = output_tolerance(dt, {kElementwise.rtol, 4e-6});

      Tensor ref = Tensor::empty({n}, DType::f32);
      ops::gelu_tanh_forward(ref, xr);
      Guarded y(Shape{n}, dt);
      ops::gelu_tanh_forward(y.view(), to_gpu(x, dt));
      EXPECT_TRUE(matches(y, ref, gelu_tol));

      ops::gelu_tanh_backward(ref, dyr, xr);
      Guarded dx(Shape{n}, dt);
      ops::gelu_tanh_backward(dx.view(), to_gpu(dy, dt), to_gpu(x, dt));
      EXPECT_TRUE(matches(dx, ref, gelu_tol));

      ops::swiglu_forward(ref, xr, upr);
      Guarded s(Shape{n}, dt);
      ops::swiglu_forward(s.view(), to_gpu(x, dt), to_gpu(up, dt));
      EXPECT_TRUE(matches(s, ref, tol));

      Tensor ref_dgate = Tensor::empty({n}, DType::f32), ref_dup = Tensor::empty({n}, DType::f32);
      ops::swiglu_backward(ref_dgate, ref_dup, dyr, xr, upr);
      Guarded dgate(Shape{n}, dt), dup(Shape{n}, dt);
      ops::swiglu_backward(dgate.view(), dup.view(), to_gpu(dy, dt), to_gpu(x, dt), to_gpu(up, dt));
      EXPECT_TRUE(matches(dgate, ref_dgate, tol));
      EXPECT_TRUE(matches(dup, ref_dup, tol));
      Tensor none;  // one gradient only
      Guarded dup_only(Shape{n}, dt);
      ops::swiglu_backward(none, dup_only.view(), to_gpu(dy, dt), to_gpu(x, dt), to_gpu(up, dt));
      EXPECT_TRUE(matches(dup_only, ref_dup, tol));
    }
}

}  // namespace
}  // namespace vlm::testing
