// The op boundary: supports(), the CUDA dispatch (in a build without CUDA, a CUDA tensor aborts naming the op) and
// malformed calls, each of which must abort with a message naming the op.
#include <gtest/gtest.h>

#include <functional>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

const char* const kAllOps[] = {"cast",
                               "matmul",
                               "matmul_batched",
                               "linear_forward",
                               "linear_add_forward",
                               "linear_backward",
                               "linear_gelu_forward",
                               "linear_dgelu_backward",
                               "fill",
                               "scale",
                               "add",
                               "add_inplace",
                               "add_rows_broadcast",
                               "add_rows_broadcast_backward",
                               "layernorm_forward",
                               "layernorm_backward",
                               "rmsnorm_forward",
                               "rmsnorm_backward",
                               "add_layernorm_forward",
                               "add_layernorm_backward",
                               "add_rmsnorm_forward",
                               "add_rmsnorm_backward",
                               "gelu_tanh_forward",
                               "gelu_tanh_backward",
                               "swiglu_forward",
                               "swiglu_backward",
                               "rope_forward",
                               "rope_backward",
                               "qkv_split_forward",
                               "qkv_split_backward",
                               "swiglu_packed_forward",
                               "swiglu_packed_backward",
                               "attention_forward",
                               "attention_backward",
                               "paged_kv_write",
                               "qkv_split_paged_write",
                               "paged_attention",
                               "cross_entropy_forward",
                               "cross_entropy_backward",
                               "cross_entropy_forward_backward",
                               "lm_head_cross_entropy",
                               "embedding_forward",
                               "embedding_backward",
                               "image_to_patches",
                               "image_to_patches_backward",
                               "pixel_shuffle_forward",
                               "pixel_shuffle_backward",
                               "scatter_rows",
                               "gather_rows",
                               "adamw_step",
                               "adamw_step_multi",
                               "sum_of_squares"};

#ifdef VLM_HAVE_CUDA
constexpr bool kCudaBuild = true;
#else
constexpr bool kCudaBuild = false;
#endif

TEST(Dispatch, SupportsEveryOpOnCpuAndOnCudaInACudaBuild) {
  for (const char* op : kAllOps) {
    EXPECT_TRUE(ops::supports(op, Device::cpu())) << op;
    EXPECT_EQ(ops::supports(op, Device::cuda(0)), kCudaBuild) << op;
  }
  EXPECT_FALSE(ops::supports("no_such_op", Device::cpu()));
  EXPECT_FALSE(ops::supports("", Device::cpu()));
}

// A CUDA tensor that is never dereferenced: the boundary must refuse it before touching memory. Each gets its own
// address so the aliasing checks see distinct tensors.
Tensor fake_cuda(const Shape& shape, DType dtype = DType::f32) {
  static float dummy[64];
  static int next = 0;
  return Tensor::borrow(&dummy[next++ % 64], shape, dtype, Device::cuda(0), nullptr);
}

TEST(Dispatch, CudaTensorsAbortInABuildWithoutCuda) {
  if (kCudaBuild) GTEST_SKIP() << "this build has the CUDA ops (tests/kernels/cuda)";
  use_threadsafe_death_tests();
  Tensor x = fake_cuda({4, 8}), y = fake_cuda({4, 8}), w = fake_cuda({8}), stats = fake_cuda({4});
  EXPECT_DEATH(ops::fill(x, 1.f), "ops::fill: no CUDA implementation in this build yet");
  EXPECT_DEATH(ops::add(y, x, x), "ops::add: no CUDA implementation in this build yet");
  Tensor out = fake_cuda({4, 4});
  EXPECT_DEATH(ops::matmul(out, x, y, false, true), "ops::matmul: no CUDA implementation in this build yet");
  EXPECT_DEATH(ops::rmsnorm_forward(y, stats, x, w, 1e-5f), "ops::rmsnorm_forward: no CUDA implementation");
  Tensor q = fake_cuda({5, 2, 4}), lse = fake_cuda({2, 5}), cu = fake_cuda({2}, DType::i32);
  EXPECT_DEATH(ops::attention_forward(q, lse, q, q, q, cu, cu, 5, 5, 0.5f, true),
               "ops::attention_forward: no CUDA implementation in this build yet");
  EXPECT_DEATH(ops::sum_of_squares({x}), "ops::sum_of_squares: no CUDA implementation");
  // Mixed devices are a shape/device error, not a dispatch.
  Tensor cpu_x = Tensor::zeros({4, 8}, DType::f32);
  EXPECT_DEATH(ops::add(y, cpu_x, x), "ops::add: a is f32\\[4, 8\\] cpu, expected device cuda:0");
}

struct Misuse {
  const char* op;
  std::function<void()> call;
};

TEST(Dispatch, MalformedCallsAbortNamingTheOp) {
  use_threadsafe_death_tests();
  auto f32 = [](const Shape& s) { return Tensor::zeros(s, DType::f32); };
  auto i32 = [](const Shape& s) { return Tensor::zeros(s, DType::i32); };
  Tensor none;
  const std::vector<Misuse> cases = {
      {"cast",
       [&] {
         Tensor o = f32({3});
         ops::cast(o, f32({4}));
       }},
      {"matmul",
       [&] {
         Tensor o = f32({3, 4});
         ops::matmul(o, f32({3, 5}), f32({6, 4}), false, false);
       }},
      {"matmul_batched",
       [&] {
         Tensor o = f32({2, 3, 4});
         ops::matmul_batched(o, f32({3, 3, 5}), f32({2, 5, 4}), false, false);
       }},
      {"linear_forward",
       [&] {
         Tensor y = f32({3, 4});
         ops::linear_forward(y, f32({3, 5}), f32({4, 6}), none);
       }},
      {"linear_add_forward",
       [&] {
         Tensor y = f32({3, 4});
         ops::linear_add_forward(y, f32({3, 6}), f32({4, 6}), none, f32({3, 5}));
       }},
      {"linear_backward",
       [&] {
         Tensor dx = f32({3, 5}), dw = f32({4, 5}), db = f32({5});
         ops::linear_backward(dx, dw, db, f32({3, 4}), f32({3, 5}), f32({4, 5}));
       }},
      {"linear_gelu_forward",
       [&] {
         Tensor y = f32({3, 4}), pre = f32({3, 5});
         ops::linear_gelu_forward(y, pre, f32({3, 6}), f32({4, 6}), none);
       }},
      {"linear_dgelu_backward",
       [&] {
         Tensor dpre = f32({3, 6});  // dy has 5 columns, w has 4 rows
         ops::linear_dgelu_backward(dpre, f32({3, 5}), f32({4, 6}), f32({3, 6}));
       }},
      {"fill",
       [&] {
         Tensor t = i32({3});
         ops::fill(t, 1.f);
       }},
      {"scale",
       [&] {
         Tensor t = f32({4, 4}).slice(1, 0, 2);
         ops::scale(t, 2.f);
       }},  // not contiguous
      {"add",
       [&] {
         Tensor o = f32({3});
         ops::add(o, f32({3}), f32({4}));
       }},
      {"add_inplace",
       [&] {
         Tensor a = f32({3});
         ops::add_inplace(a, f32({2}));
       }},
      {"add_rows_broadcast",
       [&] {
         Tensor x = f32({10, 4});
         ops::add_rows_broadcast(x, f32({3, 4}));
       }},
      {"add_rows_broadcast_backward",
       [&] {
         Tensor d = f32({3, 5});
         ops::add_rows_broadcast_backward(d, f32({9, 4}));
       }},
      {"layernorm_forward",
       [&] {
         Tensor y = f32({3, 4}), m = f32({3}), r = f32({3});
         ops::layernorm_forward(y, m, r, f32({3, 4}), f32({5}), none, 1e-5f);
       }},
      {"layernorm_backward",
       [&] {
         Tensor dx = f32({3, 4}), dw = f32({4}), db = f32({4});
         ops::layernorm_backward(dx, dw, db, f32({3, 4}), f32({3, 4}), f32({4}), f32({2}), f32({3}));
       }},
      {"rmsnorm_forward",
       [&] {
         Tensor y = f32({3, 5}), r = f32({3});
         ops::rmsnorm_forward(y, r, f32({3, 4}), f32({4}), 1e-5f);
       }},
      {"rmsnorm_backward",
       [&] {
         Tensor dx = f32({3, 4}), dw = f32({3});
         ops::rmsnorm_backward(dx, dw, f32({3, 4}), f32({3, 4}), f32({4}), f32({3}));
       }},
      {"add_layernorm_forward",
       [&] {
         Tensor h = f32({3, 4}), y = f32({3, 4}), m = f32({3}), r = f32({3});
         ops::add_layernorm_forward(h, y, m, r, f32({3, 4}), f32({2, 4}), f32({4}), none, 1e-5f);
       }},
      {"add_layernorm_backward",
       [&] {
         Tensor dh = f32({3, 4}), dw = f32({4}), db = f32({4});
         ops::add_layernorm_backward(dh, dw, db, f32({3, 4}), f32({3, 5}), f32({3, 4}), f32({4}), f32({3}), f32({3}));
       }},
      {"add_rmsnorm_forward",
       [&] {
         Tensor h, y = f32({3, 4}), r = f32({3});
         ops::add_rmsnorm_forward(h, y, r, f32({3, 4}), f32({3, 4}), f32({4}), 1e-5f);
       }},  // h missing
      {"add_rmsnorm_backward",
       [&] {
         Tensor dh = f32({3, 4}), dw = f32({4});
         ops::add_rmsnorm_backward(dh, dw, f32({3, 4}), f32({3, 4}), f32({3, 4}), f32({4}), f32({2}));
       }},
      {"gelu_tanh_forward",
       [&] {
         Tensor y = f32({3});
         ops::gelu_tanh_forward(y, f32({4}));
       }},
      {"gelu_tanh_backward",
       [&] {
         Tensor dx = f32({3});
         ops::gelu_tanh_backward(dx, f32({3}), f32({2}));
       }},
      {"swiglu_forward",
       [&] {
         Tensor y = f32({3});
         ops::swiglu_forward(y, f32({3}), f32({4}));
       }},
      {"swiglu_backward",
       [&] {
         Tensor dg = f32({3}), du = f32({5});
         ops::swiglu_backward(dg, du, f32({3}), f32({3}), f32({3}));
       }},
      {"rope_forward",
       [&] {
         Tensor x = f32({3, 2, 5});
         ops::rope_forward(x, i32({3}), 1e4f);
       }},  // odd head dim
      {"rope_backward",
       [&] {
         Tensor x = f32({3, 2, 4});
         ops::rope_backward(x, i32({2}), 1e4f);
       }},
      {"qkv_split_forward",
       [&] {
         Tensor q = f32({3, 2, 4}), k = f32({3, 1, 4}), v = f32({3, 1, 4});
         ops::qkv_split_forward(q, k, v, f32({3, 12}), i32({3}), 1e4f);
       }},  // qkv narrower than Hq + 2 Hkv heads
      {"qkv_split_backward",
       [&] {
         Tensor d = f32({3, 16});
         ops::qkv_split_backward(d, f32({3, 2, 4}), f32({3, 1, 4}), f32({3, 1, 4}), none, 1e4f);
       }},  // theta > 0 without positions
      {"swiglu_packed_forward",
       [&] {
         Tensor y = f32({3, 4});
         ops::swiglu_packed_forward(y, f32({3, 4}));
       }},
      {"swiglu_packed_backward",
       [&] {
         Tensor d = f32({3, 8});
         ops::swiglu_packed_backward(d, f32({3, 4}), f32({3, 6}));
       }},
      {"attention_forward",
       [&] {
         Tensor o = f32({5, 3, 4}), l = f32({3, 5});
         ops::attention_forward(o, l, f32({5, 3, 4}), f32({5, 2, 4}), f32({5, 2, 4}), i32({2}), i32({2}), 5, 5, 1.f,
                                false);
       }},
      {"attention_backward",
       [&] {
         Tensor dq = f32({5, 2, 4}), dk = f32({5, 2, 4}), dv = f32({5, 2, 3});
         ops::attention_backward(dq, dk, dv, f32({5, 2, 4}), f32({5, 2, 4}), f32({5, 2, 4}), f32({5, 2, 4}),
                                 f32({5, 2, 4}), f32({2, 5}), i32({2}), i32({2}), 5, 5, 1.f, false);
       }},
      {"paged_kv_write",
       [&] {
         Tensor kc = f32({2, 4, 2, 8}), vc = f32({2, 4, 2, 8});
         ops::paged_kv_write(kc, vc, f32({3, 2, 8}), f32({3, 2, 8}), i32({2}));
       }},
      {"qkv_split_paged_write",
       [&] {
         Tensor q = f32({3, 2, 8}), kc = f32({2, 4, 1, 8}), vc = f32({2, 4, 1, 8});
         ops::qkv_split_paged_write(q, kc, vc, f32({3, 24}), i32({3}), i32({3}), 1e4f);
       }},  // qkv narrower than H + 2 Hkv heads
      {"paged_attention",
       [&] {
         Tensor o = f32({2, 4, 8});
         ops::paged_attention(o, f32({2, 4, 8}), f32({2, 4, 2, 8}), f32({2, 4, 2, 4}), i32({1, 2}), i32({1}),
                              i32({2}), 2, 2, 1.f);
       }},
      {"cross_entropy_forward",
       [&] {
         Tensor l = f32({3});
         ops::cross_entropy_forward(l, f32({3, 7}), i32({4}), -100);
       }},
      {"cross_entropy_backward",
       [&] {
         Tensor d = f32({3, 6});
         ops::cross_entropy_backward(d, f32({3, 7}), i32({3}), 1.f, -100);
       }},
      {"cross_entropy_forward_backward",
       [&] {
         Tensor l = f32({2}), d = f32({3, 7});
         ops::cross_entropy_forward_backward(l, d, f32({3, 7}), i32({3}), 1.f, -100);
       }},
      {"lm_head_cross_entropy",
       [&] {
         Tensor l = f32({3});
         ops::lm_head_cross_entropy(l, none, none, f32({3, 4}), f32({7, 4}), i32({3}), 1.f, -100, 0);
       }},  // chunk_rows 0
      {"embedding_forward",
       [&] {
         Tensor o = f32({3, 4});
         ops::embedding_forward(o, f32({10, 5}), i32({3}));
       }},
      {"embedding_backward",
       [&] {
         Tensor d = f32({10, 4});
         ops::embedding_backward(d, f32({3, 4}), f32({3}));
       }},  // ids f32
      {"image_to_patches",
       [&] {
         Tensor p = f32({4, 12});
         ops::image_to_patches(p, f32({1, 3, 5, 4}), 2);
       }},
      {"image_to_patches_backward",
       [&] {
         Tensor d = f32({1, 3, 4, 4});
         ops::image_to_patches_backward(d, f32({4, 13}), 2);
       }},
      {"pixel_shuffle_forward",
       [&] {
         Tensor y = f32({1, 2, 12});
         ops::pixel_shuffle_forward(y, f32({1, 8, 3}), 2);
       }},
      {"pixel_shuffle_backward",
       [&] {
         Tensor dx = f32({1, 16, 3});
         ops::pixel_shuffle_backward(dx, f32({1, 4, 3}), 2);
       }},
      {"scatter_rows",
       [&] {
         Tensor o = f32({5, 3});
         ops::scatter_rows(o, f32({2, 4}), i32({2}));
       }},
      {"gather_rows",
       [&] {
         Tensor o = f32({2, 3});
         ops::gather_rows(o, f32({5, 3}), i32({3}));
       }},
      {"adamw_step",
       [&] {
         Tensor p = f32({3}), m = f32({3}), v = f32({2});
         ops::adamw_step(p, f32({3}), m, v, {}, 1);
       }},
      {"adamw_step_multi",
       [&] {
         ops::adamw_step_multi({{f32({3}), f32({3}), f32({3}), f32({4}), none}}, {}, 1);
       }},
      {"sum_of_squares",
       [&] {
         ops::sum_of_squares({f32({3}), i32({2})});
       }},
  };
  EXPECT_EQ(cases.size(), std::size(kAllOps));  // one misuse per op
  for (const Misuse& m : cases) {
    SCOPED_TRACE(m.op);
    EXPECT_DEATH(m.call(), std::string("ops::") + m.op + ": ");
  }
}

}  // namespace
}  // namespace vlm::testing
