// Determinism: the heavier ops give bit-identical results on repeated calls, and (all but the OpenBLAS GEMMs) with
// one thread or several, so a resumed training run reproduces the uninterrupted one exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

// Runs `op` (which fills the returned tensors from fixed inputs) twice with all threads and once with one thread;
// all three results must be bitwise equal (the one-thread run only when `thread_independent`).
void expect_deterministic(const char* name, const std::function<std::vector<Tensor>()>& op,
                          bool thread_independent = true) {
  SCOPED_TRACE(name);
  const std::vector<Tensor> first = op(), second = op();
  std::vector<Tensor> single;
  with_threads(1, [&] { single = op(); });
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(first[i], second[i])) << "output " << i << ", repeated call";
    if (thread_independent) {
      EXPECT_TRUE(bitwise_equal(first[i], single[i])) << "output " << i << ", 1 thread";
    }
  }
}

TEST(Determinism, HeavyOpsAreBitwiseReproducible) {
  const int64_t rows = 512, cols = 384, hidden = 256;
  const Tensor x = random_normal({rows, cols}, 1), w = random_normal({cols}, 2), b = random_normal({cols}, 3);
  const Tensor dy = random_normal({rows, cols}, 4), lw = random_normal({hidden, cols}, 5);
  const Tensor lb = random_normal({hidden}, 6), ldy = random_normal({rows, hidden}, 7);
  const float eps = 1e-5f;

  expect_deterministic(
      "linear",
      [&] {
        Tensor y = Tensor::empty({rows, hidden}, DType::f32), dx = Tensor::empty(x.shape(), DType::f32);
        Tensor dw = Tensor::zeros(lw.shape(), DType::f32), db = Tensor::zeros(lb.shape(), DType::f32);
        ops::linear_forward(y, x, lw, lb);
        ops::linear_backward(dx, dw, db, ldy, x, lw);
        return std::vector<Tensor>{y, dx, dw, db};
      },
      /*thread_independent=*/false);

  expect_deterministic("layernorm", [&] {
    Tensor y = Tensor::empty(x.shape(), DType::f32), mean = Tensor::empty({rows}, DType::f32);
    Tensor rstd = Tensor::empty({rows}, DType::f32), dx = Tensor::empty(x.shape(), DType::f32);
    Tensor dw = Tensor::zeros({cols}, DType::f32), db = Tensor::zeros({cols}, DType::f32);
    ops::layernorm_forward(y, mean, rstd, x, w, b, eps);
    ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
    return std::vector<Tensor>{y, mean, rstd, dx, dw, db};
  });

  expect_deterministic("rmsnorm", [&] {
    Tensor y = Tensor::empty(x.shape(), DType::f32), rstd = Tensor::empty({rows}, DType::f32);
    Tensor dx = Tensor::empty(x.shape(), DType::f32), dw = Tensor::zeros({cols}, DType::f32);
    ops::rmsnorm_forward(y, rstd, x, w, eps);
    ops::rmsnorm_backward(dx, dw, dy, x, w, rstd);
    return std::vector<Tensor>{y, rstd, dx, dw};
  });

  expect_deterministic("attention", [&] {
    const Tensor cu = i32_tensor({0, 100, 101, 101, 230, 300});
    const Tensor q = random_normal({300, 6, 32}, 10), k = random_normal({300, 2, 32}, 11);
    const Tensor v = random_normal({300, 2, 32}, 12), dout = random_normal({300, 6, 32}, 13);
    Tensor out = Tensor::empty(q.shape(), DType::f32), lse = Tensor::empty({6, 300}, DType::f32);
    Tensor dq = Tensor::empty(q.shape(), DType::f32), dk = Tensor::empty(k.shape(), DType::f32);
    Tensor dv = Tensor::empty(k.shape(), DType::f32);
    ops::attention_forward(out, lse, q, k, v, cu, cu, 129, 129, 0.17f, true);
    ops::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, cu, cu, 129, 129, 0.17f, true);
    return std::vector<Tensor>{out, lse, dq, dk, dv};
  });

  expect_deterministic("cross_entropy", [&] {
    const Tensor logits = random_normal({64, 3001}, 20, 4.f);
    std::vector<int32_t> targets(64);
    for (int32_t t = 0; t < 64; ++t) targets[static_cast<size_t>(t)] = t % 5 == 0 ? -100 : (t * 97) % 3001;
    Tensor losses = Tensor::empty({64}, DType::f32), dlogits = Tensor::empty(logits.shape(), DType::f32);
    ops::cross_entropy_forward(losses, logits, i32_tensor(targets), -100);
    ops::cross_entropy_backward(dlogits, logits, i32_tensor(targets), 1.f / 51, -100);
    return std::vector<Tensor>{losses, dlogits};
  });

  expect_deterministic("embedding_backward", [&] {
    std::vector<int32_t> ids(2000);
    for (size_t t = 0; t < ids.size(); ++t) ids[t] = static_cast<int32_t>((t * t) % 37);  // many repeats
    const Tensor dout = random_normal({2000, 64}, 30);
    Tensor dtable = Tensor::zeros({50, 64}, DType::f32);
    ops::embedding_backward(dtable, dout, i32_tensor(ids));
    return std::vector<Tensor>{dtable};
  });

  expect_deterministic("add_rows_broadcast_backward", [&] {
    const Tensor dx = random_normal({16 * 49, 300}, 40);
    Tensor dpos = Tensor::zeros({49, 300}, DType::f32);
    ops::add_rows_broadcast_backward(dpos, dx);
    return std::vector<Tensor>{dpos};
  });

  expect_deterministic("adamw_and_sum_of_squares", [&] {
    Tensor p = random_normal({200000}, 50), g = random_normal({200000}, 51);
    Tensor m = random_normal({200000}, 52, 0.1f), v = random_uniform({200000}, 53, 0.f, 0.01f);
    ops::AdamWSettings hp;
    hp.beta2 = 0.999f;
    hp.weight_decay = 0.1f;
    ops::adamw_step(p, g, m, v, hp, 7);
    const double sq = ops::sum_of_squares({p, g, m, v});
    Tensor sq_bits = Tensor::from_vector(std::vector<int64_t>{0}, {1});
    std::memcpy(sq_bits.data<int64_t>(), &sq, sizeof sq);
    return std::vector<Tensor>{p, m, v, sq_bits};
  });
}

}  // namespace
}  // namespace vlm::testing
