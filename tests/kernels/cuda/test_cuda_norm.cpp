// LayerNorm and RMSNorm on CUDA against the CPU reference: forward (y, mean, rstd; optional bias and statistics),
// backward (dx overwritten, dw/db accumulated in f32), and the fused residual variants (h = x + residual, then the
// norm; dh = norm backward + dh_next, also in place), on odd widths, f32 and bf16.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

constexpr float kEps = 1e-5f;

const Shape kShapes[] = {{1, 1}, {3, 17}, {17, 33}, {4, 768}, {2, 3, 5}, {5, 300}, {64, 64}, {129, 576}, {2, 2049}};

// Row statistics and per-row outputs: fp32 sums in a different order (relative 1e-5 covers rows of a few thousand).
constexpr Tolerance kRow{2e-5, 2e-5};
// Weight gradients sum over all rows.
Tolerance column_tolerance(int64_t rows) { return {2e-5, 2e-6 * static_cast<double>(rows + 1)}; }

Shape rows_of(const Shape& s) {  // product of the leading dims (numel / C fails for C == 0)
  int64_t rows = 1;
  for (int i = 0; i + 1 < s.ndim(); ++i) rows *= s[i];
  return Shape{rows};
}

TEST(CudaNorm, LayerNormMatchesCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 1;
  for (DType dt : compute_dtypes())
    for (const Shape& shape : kShapes)
      for (bool bias : {true, false}) {
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " " << shape.to_string() << (bias ? " bias" : ""));
        const int64_t cols = shape[shape.ndim() - 1], rows = rows_of(shape)[0];
        const Tensor x = random_normal(shape, seed++, 2.f), w = random_normal({cols}, seed++);
        const Tensor b = bias ? random_normal({cols}, seed++) : Tensor();
        const Tensor xr = rounded(x, dt), wr = rounded(w, dt), br = bias ? rounded(b, dt) : Tensor();
        Tensor ref_y = Tensor::empty(shape, DType::f32), ref_mean = Tensor::empty(rows_of(shape), DType::f32);
        Tensor ref_rstd = Tensor::empty(rows_of(shape), DType::f32);
        ops::layernorm_forward(ref_y, ref_mean, ref_rstd, xr, wr, br, kEps);
        Guarded y(shape, dt), mean(rows_of(shape), DType::f32), rstd(rows_of(shape), DType::f32);
        const Tensor xg = to_gpu(x, dt), wg = to_gpu(w, dt), bg = bias ? to_gpu(b, dt) : Tensor();
        ops::layernorm_forward(y.view(), mean.view(), rstd.view(), xg, wg, bg, kEps);
        EXPECT_TRUE(matches(y, ref_y, output_tolerance(dt, kRow)));
        EXPECT_TRUE(matches(mean, ref_mean, kRow));
        EXPECT_TRUE(matches(rstd, ref_rstd, kRow));
        Tensor none;  // statistics not needed: same y
        Guarded y2(shape, dt);
        ops::layernorm_forward(y2.view(), none, none, xg, wg, bg, kEps);
        EXPECT_TRUE(bitwise_equal(y2.view().to(Device::cpu()), y.view().to(Device::cpu())));

        const Tensor dy = random_normal(shape, seed++);
        const Tensor dw0 = random_normal({cols}, seed++), db0 = random_normal({cols}, seed++);
        Tensor ref_dx = Tensor::empty(shape, DType::f32), ref_dw = dw0.clone(), ref_db = db0.clone();
        ops::layernorm_backward(ref_dx, ref_dw, ref_db, rounded(dy, dt), xr, wr, ref_mean, ref_rstd);
        Guarded dx(shape, dt), dw(dw0, DType::f32), db(db0, DType::f32);
        ops::layernorm_backward(dx.view(), dw.view(), db.view(), to_gpu(dy, dt), xg, wg, ref_mean.to(gpu()),
                                ref_rstd.to(gpu()));
        EXPECT_TRUE(matches(dx, ref_dx, output_tolerance(dt, kRow)));
        EXPECT_TRUE(matches(dw, ref_dw, column_tolerance(rows)));
        EXPECT_TRUE(matches(db, ref_db, column_tolerance(rows)));
      }
}

TEST(CudaNorm, RmsNormMatchesCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 100;
  for (DType dt : compute_dtypes())
    for (const Shape& shape : kShapes) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " " << shape.to_string());
      const int64_t cols = shape[shape.ndim() - 1], rows = rows_of(shape)[0];
      const Tensor x = random_normal(shape, seed++, 2.f), w = random_normal({cols}, seed++);
      const Tensor xr = rounded(x, dt), wr = rounded(w, dt);
      Tensor ref_y = Tensor::empty(shape, DType::f32), ref_rstd = Tensor::empty(rows_of(shape), DType::f32);
      ops::rmsnorm_forward(ref_y, ref_rstd, xr, wr, kEps);
      Guarded y(shape, dt), rstd(rows_of(shape), DType::f32);
      const Tensor xg = to_gpu(x, dt), wg = to_gpu(w, dt);
      ops::rmsnorm_forward(y.view(), rstd.view(), xg, wg, kEps);
      EXPECT_TRUE(matches(y, ref_y, output_tolerance(dt, kRow)));
      EXPECT_TRUE(matches(rstd, ref_rstd, kRow));

      const Tensor dy = random_normal(shape, seed++), dw0 = random_normal({cols}, seed++);
      Tensor ref_dx = Tensor::empty(shape, DType::f32), ref_dw = dw0.clone();
      ops::rmsnorm_backward(ref_dx, ref_dw, rounded(dy, dt), xr, wr, ref_rstd);
      Guarded dx(shape, dt), dw(dw0, DType::f32);
      ops::rmsnorm_backward(dx.view(), dw.view(), to_gpu(dy, dt), xg, wg, ref_rstd.to(gpu()));
      EXPECT_TRUE(matches(dx, ref_dx, output_tolerance(dt, kRow)));
      EXPECT_TRUE(matches(dw, ref_dw, column_tolerance(rows)));
    }
}

// The fused residual variants against the CPU composition. In bf16 the GPU stores h rounded to bf16 and normalizes
// that, so the reference normalizes the same rounded h (the GPU's own h output, checked first).
TEST(CudaNorm, FusedResidualVariantsMatchCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 200;
  for (DType dt : compute_dtypes())
    for (const Shape& shape : kShapes)
      for (bool layer : {true, false}) {
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " " << shape.to_string()
                                          << (layer ? " layernorm" : " rmsnorm"));
        const int64_t cols = shape[shape.ndim() - 1], rows = rows_of(shape)[0];
        const Tensor x = random_normal(shape, seed++), res = random_normal(shape, seed++, 2.f);
        const Tensor w = random_normal({cols}, seed++), b = random_normal({cols}, seed++);
        const Tensor wr = rounded(w, dt), br = rounded(b, dt);
        Tensor ref_h = Tensor::empty(shape, DType::f32);
        ops::add(ref_h, rounded(x, dt), rounded(res, dt));
        Guarded h(shape, dt), y(shape, dt), mean(rows_of(shape), DType::f32), rstd(rows_of(shape), DType::f32);
        const Tensor wg = to_gpu(w, dt), bg = to_gpu(b, dt);
        if (layer) {
          ops::add_layernorm_forward(h.view(), y.view(), mean.view(), rstd.view(), to_gpu(x, dt), to_gpu(res, dt), wg,
                                     bg, kEps);
        } else {
          ops::add_rmsnorm_forward(h.view(), y.view(), rstd.view(), to_gpu(x, dt), to_gpu(res, dt), wg, kEps);
        }
        EXPECT_TRUE(matches(h, ref_h, output_tolerance(dt, {1e-7, 1e-7})));
        const Tensor h_seen = to_cpu_f32(h.view());  // = ref_h rounded to dt
        Tensor ref_y = Tensor::empty(shape, DType::f32), ref_mean = Tensor::empty(rows_of(shape), DType::f32);
        Tensor ref_rstd = Tensor::empty(rows_of(shape), DType::f32);
        if (layer) ops::layernorm_forward(ref_y, ref_mean, ref_rstd, h_seen, wr, br, kEps);
        else ops::rmsnorm_forward(ref_y, ref_rstd, h_seen, wr, kEps);
        EXPECT_TRUE(matches(y, ref_y, output_tolerance(dt, kRow)));
        if (layer) {
          EXPECT_TRUE(matches(mean, ref_mean, kRow));
        }
        EXPECT_TRUE(matches(rstd, ref_rstd, kRow));

        // Backward: dh = norm_backward(dy) + dh_next, in a separate output and in place over dh_next.
        const Tensor dy = random_normal(shape, seed++), dh_next = random_normal(shape, seed++);
        const Tensor dw0 = random_normal({cols}, seed++), db0 = random_normal({cols}, seed++);
        Tensor ref_dh = Tensor::empty(shape, DType::f32), ref_dw = dw0.clone(), ref_db = db0.clone();
        if (layer)
          ops::add_layernorm_backward(ref_dh, ref_dw, ref_db, rounded(dy, dt), rounded(dh_next, dt), h_seen, wr,
                                      ref_mean, ref_rstd);
        else
          ops::add_rmsnorm_backward(ref_dh, ref_dw, rounded(dy, dt), rounded(dh_next, dt), h_seen, wr, ref_rstd);
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(in_place ? "in place" : "separate output");
          Guarded dh_next_g(dh_next, dt), dw(dw0, DType::f32), db(db0, DType::f32);
          Guarded separate(shape, dt);
          Guarded& dh = in_place ? dh_next_g : separate;
          const Tensor dyg = to_gpu(dy, dt), hg = h.view(), mg = ref_mean.to(gpu()), rg = ref_rstd.to(gpu());
          if (layer)
            ops::add_layernorm_backward(dh.view(), dw.view(), db.view(), dyg, dh_next_g.view(), hg, wg, mg, rg);
          else
            ops::add_rmsnorm_backward(dh.view(), dw.view(), dyg, dh_next_g.view(), hg, wg, rg);
          EXPECT_TRUE(matches(dh, ref_dh, output_tolerance(dt, kRow)));
          EXPECT_TRUE(matches(dw, ref_dw, column_tolerance(rows)));
          if (layer) {
            EXPECT_TRUE(matches(db, ref_db, column_tolerance(rows)));
          }
        }
      }
}

}  // namespace
}  // namespace vlm::testing
