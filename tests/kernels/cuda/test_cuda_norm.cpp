// LayerNorm and RMSNorm on CUDA against the CPU reference: forward (y, mean, rstd; optional bias and statistics),
// backward (dx overwritten, dw/db accumulated in f32), and the fused residual variants (h = x + residual, then the
// norm; dh = norm backward + dh_next, also in place), on odd widths, f32 and bf16. The shapes cover both CUDA paths:
// the row-in-registers one (widths a multiple of 8 (bf16) / 4 (f32) up to 2048 / 1024, e.g. the model's 576 and 768,
// with row counts that leave partial blocks and several rows per warp) and the scalar fallback (other widths, and
// inputs whose data pointer is not 16-byte aligned).
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

constexpr float kEps = 1e-5f;

const Shape kShapes[] = {{1, 1},   {3, 17},   {17, 33},  {4, 768},  {2, 3, 5},   {5, 300},    {64, 64},
                         {129, 576}, {2, 2049}, {7, 100}, {3, 1024}, {3, 2048}, {1037, 768}, {2053, 576}};

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

// Inputs that start 1 or 3 elements into their buffer (not 16-byte aligned: the scalar fallback) or 8 elements in
// (aligned for both dtypes: the vector path), on the model's widths: same results as the CPU.
TEST(CudaNorm, OffsetViewsMatchCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 400;
  for (DType dt : compute_dtypes())
    for (const Shape& shape : {Shape{37, 576}, Shape{21, 768}})
      for (int64_t offset : {1, 3, 8})
        for (bool layer : {true, false}) {
          SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " " << shape.to_string() << " offset " << offset
                                            << (layer ? " layernorm" : " rmsnorm"));
          const int64_t cols = shape[1], rows = shape[0];
          const Tensor x = random_normal(shape, seed++), res = random_normal(shape, seed++, 2.f);
          const Tensor w = random_normal({cols}, seed++), b = random_normal({cols}, seed++);
          const Tensor wr = rounded(w, dt), br = rounded(b, dt), wg = to_gpu(w, dt), bg = to_gpu(b, dt);
          // Forward with residual: x and residual misaligned (h and y are aligned outputs).
          Tensor ref_h = Tensor::empty(shape, DType::f32);
          ops::add(ref_h, rounded(x, dt), rounded(res, dt));
          Guarded h(shape, dt), y(shape, dt), mean(Shape{rows}, DType::f32), rstd(Shape{rows}, DType::f32);
          const Tensor xg = to_gpu_at_offset(x, dt, offset), resg = to_gpu_at_offset(res, dt, offset);
          if (layer)
            ops::add_layernorm_forward(h.view(), y.view(), mean.view(), rstd.view(), xg, resg, wg, bg, kEps);
          else
            ops::add_rmsnorm_forward(h.view(), y.view(), rstd.view(), xg, resg, wg, kEps);
          EXPECT_TRUE(matches(h, ref_h, output_tolerance(dt, {1e-7, 1e-7})));
          const Tensor h_seen = to_cpu_f32(h.view());
          Tensor ref_y = Tensor::empty(shape, DType::f32), ref_mean = Tensor::empty({rows}, DType::f32);
          Tensor ref_rstd = Tensor::empty({rows}, DType::f32);
          if (layer) ops::layernorm_forward(ref_y, ref_mean, ref_rstd, h_seen, wr, br, kEps);
          else ops::rmsnorm_forward(ref_y, ref_rstd, h_seen, wr, kEps);
          EXPECT_TRUE(matches(y, ref_y, output_tolerance(dt, kRow)));
          if (layer) {
            EXPECT_TRUE(matches(mean, ref_mean, kRow));
          }
          EXPECT_TRUE(matches(rstd, ref_rstd, kRow));
          // Plain forward of the misaligned x.
          Tensor ref_y2 = Tensor::empty(shape, DType::f32), ref_rstd2 = Tensor::empty({rows}, DType::f32);
          Tensor ref_mean2 = Tensor::empty({rows}, DType::f32), none;
          Guarded y2(shape, dt);
          if (layer) {
            ops::layernorm_forward(ref_y2, ref_mean2, ref_rstd2, rounded(x, dt), wr, br, kEps);
            ops::layernorm_forward(y2.view(), none, none, xg, wg, bg, kEps);
          } else {
            ops::rmsnorm_forward(ref_y2, ref_rstd2, rounded(x, dt), wr, kEps);
            ops::rmsnorm_forward(y2.view(), none, xg, wg, kEps);
          }
          EXPECT_TRUE(matches(y2, ref_y2, output_tolerance(dt, kRow)));
          // Backward: dy and dh_next misaligned, in place over dh_next (dh then misaligned too).
          const Tensor dy = random_normal(shape, seed++), dh_next = random_normal(shape, seed++);
          const Tensor dw0 = random_normal({cols}, seed++), db0 = random_normal({cols}, seed++);
          Tensor ref_dh = Tensor::empty(shape, DType::f32), ref_dw = dw0.clone(), ref_db = db0.clone();
          if (layer)
            ops::add_layernorm_backward(ref_dh, ref_dw, ref_db, rounded(dy, dt), rounded(dh_next, dt), h_seen, wr,
                                        ref_mean, ref_rstd);
          else
            ops::add_rmsnorm_backward(ref_dh, ref_dw, rounded(dy, dt), rounded(dh_next, dt), h_seen, wr, ref_rstd);
          Tensor dh = to_gpu_at_offset(dh_next, dt, offset);
          Guarded dw(dw0, DType::f32), db(db0, DType::f32);
          const Tensor dyg = to_gpu_at_offset(dy, dt, offset), mg = ref_mean.to(gpu()), rg = ref_rstd.to(gpu());
          if (layer)
            ops::add_layernorm_backward(dh, dw.view(), db.view(), dyg, dh, h.view(), wg, mg, rg);
          else
            ops::add_rmsnorm_backward(dh, dw.view(), dyg, dh, h.view(), wg, rg);
          EXPECT_TRUE(all_close(to_cpu_f32(dh), ref_dh, output_tolerance(dt, kRow).rtol, kRow.atol));
          EXPECT_TRUE(matches(dw, ref_dw, column_tolerance(rows)));
          if (layer) {
            EXPECT_TRUE(matches(db, ref_db, column_tolerance(rows)));
          }
        }
}

// The backward's weight/bias gradients (per-block partials, then the sum over blocks) and dx are bit-identical on
// repeat, for widths of both paths and row counts of several blocks; and the gradients of dx-less calls (only dw,
// db wanted) equal those of full calls.
TEST(CudaNorm, BackwardIsBitwiseReproducible) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 600;
  for (DType dt : compute_dtypes())
    for (const Shape& shape : {Shape{3001, 576}, Shape{2053, 768}, Shape{999, 100}})
      for (bool layer : {true, false}) {
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " " << shape.to_string()
                                          << (layer ? " layernorm" : " rmsnorm"));
        const int64_t rows = shape[0], cols = shape[1];
        const Tensor x = to_gpu(random_normal(shape, seed++), dt), dy = to_gpu(random_normal(shape, seed++), dt);
        const Tensor w = to_gpu(random_normal({cols}, seed++), dt), b = to_gpu(random_normal({cols}, seed++), dt);
        Tensor y = Tensor::empty(shape, dt, gpu()), mean = Tensor::empty({rows}, DType::f32, gpu());
        Tensor rstd = Tensor::empty({rows}, DType::f32, gpu());
        if (layer) ops::layernorm_forward(y, mean, rstd, x, w, b, kEps);
        else ops::rmsnorm_forward(y, rstd, x, w, kEps);
        auto run = [&](bool with_dx) {
          Tensor dx = with_dx ? Tensor::empty(shape, dt, gpu()) : Tensor();
          Tensor dw = Tensor::zeros({cols}, DType::f32, gpu()), db = Tensor::zeros({cols}, DType::f32, gpu());
          if (layer) ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
          else ops::rmsnorm_backward(dx, dw, dy, x, w, rstd);
          std::vector<Tensor> out = {dw.to(Device::cpu()), db.to(Device::cpu())};
          if (with_dx) out.push_back(dx.to(Device::cpu()));
          return out;
        };
        const std::vector<Tensor> first = run(true), second = run(true), params_only = run(false);
        for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(bitwise_equal(first[i], second[i])) << "output " << i;
        for (size_t i = 0; i < params_only.size(); ++i)
          EXPECT_TRUE(bitwise_equal(first[i], params_only[i])) << "dx-less output " << i;
      }
}

}  // namespace
}  // namespace vlm::testing
