// The optimizer ops on CUDA against the CPU reference: single-tensor AdamW (with and without the bf16 weight copy),
// the multi-tensor AdamW over more tensors than one launch takes (odd and empty sizes), and sum_of_squares over f32
// and bf16 tensors; the device-side parts of a step with no host sync (sums into f64 tensors, the clipping factor
// read by AdamW on the device, HostReadback); plus the bit-reproducibility of every CUDA op with a reduction, and
// supports().
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

// One fp32 update from identical state: the GPU may contract a multiply-add (FMA) that the CPU rounds twice.
constexpr Tolerance kUpdate{2e-6, 1e-7};

ops::AdamWSettings settings() {
  ops::AdamWSettings p;
  p.lr = 1e-2f;
  p.beta1 = 0.9f;
  p.beta2 = 0.95f;
  p.eps = 1e-8f;
  p.weight_decay = 0.1f;
  return p;
}
constexpr float kGradScale = 0.5f;

struct HostState {
  Tensor param, grad, m, v;
};
HostState random_state(int64_t n, uint64_t seed) {
  return {random_normal({n}, seed), random_normal({n}, seed + 1), random_normal({n}, seed + 2, 0.1f),
          random_uniform({n}, seed + 3, 0.f, 0.01f)};
}

TEST(CudaOptimizer, AdamWMatchesCpuWithAndWithoutTheBf16Copy) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 1;
  for (int64_t n : {1, 3, 1000, 8193, 70001})
    for (bool copy : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << (copy ? " with bf16 copy" : ""));
      const HostState s = random_state(n, seed += 4);
      const ops::AdamWSettings p = settings();
      HostState ref{s.param.clone(), s.grad, s.m.clone(), s.v.clone()};
      Tensor ref_bf16 = Tensor::empty({n}, DType::bf16);
      ops::adamw_step(ref.param, ref.grad, ref.m, ref.v, p, 7, kGradScale, ref_bf16);
      Guarded param(s.param, DType::f32), m(s.m, DType::f32), v(s.v, DType::f32), bf16(Shape{n}, DType::bf16);
      if (copy) ops::adamw_step(param.view(), s.grad.to(gpu()), m.view(), v.view(), p, 7, kGradScale, bf16.view());
      else ops::adamw_step(param.view(), s.grad.to(gpu()), m.view(), v.view(), p, 7, kGradScale);
      EXPECT_TRUE(matches(param, ref.param, kUpdate));
      EXPECT_TRUE(matches(m, ref.m, kUpdate));
      EXPECT_TRUE(matches(v, ref.v, kUpdate));
      if (copy) {  // the rounding of (nearly) the same f32 value
        EXPECT_TRUE(matches(bf16, ref.param, output_tolerance(DType::bf16, kUpdate)));
      }
    }
}

TEST(CudaOptimizer, MultiTensorAdamWMatchesCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  // 150 tensors (three launches of at most 64), sizes odd, empty and over several chunks; every third has a copy.
  std::vector<HostState> host;
  std::vector<ops::AdamWTensors> cpu_set, gpu_set;
  std::vector<Guarded> gpu_params, gpu_m, gpu_v, gpu_copy;
  std::vector<Tensor> ref_copies;
  const int kTensors = 150;
  gpu_params.reserve(kTensors);
  gpu_m.reserve(kTensors);
  gpu_v.reserve(kTensors);
  gpu_copy.reserve(kTensors);
  for (int i = 0; i < kTensors; ++i) {
    const int64_t n = i % 10 == 0 ? 0 : (i * 977) % 20000 + 1;
    host.push_back(random_state(n, 1000 + 4 * static_cast<uint64_t>(i)));
    const HostState& s = host.back();
    const bool copy = i % 3 == 0;
    ref_copies.push_back(copy ? Tensor::empty({n}, DType::bf16) : Tensor());
    cpu_set.push_back({s.param.clone(), s.grad, s.m.clone(), s.v.clone(), ref_copies.back()});
    gpu_params.emplace_back(s.param, DType::f32);
    gpu_m.emplace_back(s.m, DType::f32);
    gpu_v.emplace_back(s.v, DType::f32);
    gpu_copy.emplace_back(Shape{copy ? n : 0}, DType::bf16);
    gpu_set.push_back({gpu_params.back().view(), s.grad.to(gpu()), gpu_m.back().view(), gpu_v.back().view(),
                       copy ? gpu_copy.back().view() : Tensor()});
  }
  const ops::AdamWSettings p = settings();
  ops::adamw_step_multi(cpu_set, p, 1, kGradScale);
  ops::adamw_step_multi(gpu_set, p, 1, kGradScale);
  for (int i = 0; i < kTensors; ++i) {
    SCOPED_TRACE(::testing::Message() << "tensor " << i << " n=" << host[static_cast<size_t>(i)].param.numel());
    const ops::AdamWTensors& ref = cpu_set[static_cast<size_t>(i)];
    EXPECT_TRUE(matches(gpu_params[static_cast<size_t>(i)], ref.param, kUpdate));
    EXPECT_TRUE(matches(gpu_m[static_cast<size_t>(i)], ref.m, kUpdate));
    EXPECT_TRUE(matches(gpu_v[static_cast<size_t>(i)], ref.v, kUpdate));
    if (ref.param_bf16.defined()) {
      EXPECT_TRUE(matches(gpu_copy[static_cast<size_t>(i)], ref.param, output_tolerance(DType::bf16, kUpdate)));
    }
  }
}

TEST(CudaOptimizer, SumOfSquaresMatchesCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  std::vector<Tensor> cpu_tensors, gpu_tensors;
  for (int i = 0; i < 100; ++i) {  // more tensors than one launch takes, empty ones, f32 and bf16
    const int64_t n = i % 7 == 0 ? 0 : (i * 7919) % 50000 + 1;
    const DType dt = i % 2 == 0 ? DType::f32 : DType::bf16;
    const Tensor x = random_normal({n}, 5000 + static_cast<uint64_t>(i), 0.01f * static_cast<float>(i + 1));
    cpu_tensors.push_back(rounded(x, dt));
    gpu_tensors.push_back(to_gpu(x, dt));
  }
  const double ref = ops::sum_of_squares(cpu_tensors), got = ops::sum_of_squares(gpu_tensors);
  EXPECT_NEAR(got, ref, 1e-12 * ref);  // both in fp64, different orders
  EXPECT_EQ(ops::sum_of_squares(gpu_tensors), got);  // deterministic
  EXPECT_EQ(ops::sum_of_squares(std::vector<Tensor>{gpu_tensors[0]}), 0.0);
  const Tensor one = to_gpu(Tensor::full({5}, 3.f), DType::bf16);
  EXPECT_EQ(ops::sum_of_squares({one}), 45.0);
}

Tensor gpu_f64_scalar(double value) {
  Tensor host = Tensor::empty(Shape{1}, DType::f64);
  host.data<double>()[0] = value;
  return host.to(gpu());
}

double read_f64(const Tensor& t) { return t.to(Device::cpu()).data<double>()[0]; }

TEST(CudaOptimizer, SumsIntoF64TensorsMatchCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  std::vector<Tensor> gpu_tensors;
  for (int i = 0; i < 70; ++i) {  // more tensors than one launch takes, empty ones, f32 and bf16
    const int64_t n = i % 9 == 0 ? 0 : (i * 4001) % 40000 + 1;
    gpu_tensors.push_back(to_gpu(random_normal({n}, 900 + static_cast<uint64_t>(i)), i % 2 ? DType::bf16 : DType::f32));
  }
  Tensor out = gpu_f64_scalar(-1.0);
  ops::sum_of_squares(out, gpu_tensors);
  EXPECT_EQ(read_f64(out), ops::sum_of_squares(gpu_tensors));  // the same kernels, the same order
  ops::sum_of_squares(out, {});
  EXPECT_EQ(read_f64(out), 0.0);

  for (int64_t n : {1, 255, 16384, 16385, 100003}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const Tensor x = random_normal({n}, 77 + static_cast<uint64_t>(n), 4.f);
    Tensor cpu_out = Tensor::empty(Shape{1}, DType::f64);
    ops::sum(cpu_out, x);
    const Tensor xg = x.to(gpu());
    ops::sum(out, xg);
    const double got = read_f64(out), ref = cpu_out.data<double>()[0];
    EXPECT_NEAR(got, ref, 1e-12 * std::sqrt(static_cast<double>(n)) * 4.0);  // fp64, different orders
    ops::sum(out, xg);
    EXPECT_EQ(read_f64(out), got);  // deterministic
  }
}

// AdamW with the clipping factor read on the device from a sum of squares matches the CPU's (which reads it on the
// host), below and above the limit, with the bf16 copy.
TEST(CudaOptimizer, AdamWClipFromDeviceSumMatchesCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  for (double norm_sq : {0.5, 9.0, 0.0}) {
    SCOPED_TRACE(::testing::Message() << "sum of squares " << norm_sq);
    const int64_t n = 10007;
    const HostState s = random_state(n, 300);
    ops::AdamWSettings p = settings();
    p.grad_clip = 2.f;
    HostState ref{s.param.clone(), s.grad, s.m.clone(), s.v.clone()};
    Tensor sum_cpu = Tensor::empty(Shape{1}, DType::f64);
    sum_cpu.data<double>()[0] = norm_sq;
    ops::adamw_step_multi({{ref.param, ref.grad, ref.m, ref.v, Tensor()}}, p, 5, sum_cpu);
    Guarded param(s.param, DType::f32), m(s.m, DType::f32), v(s.v, DType::f32), bf16(Shape{n}, DType::bf16);
    ops::adamw_step_multi({{param.view(), s.grad.to(gpu()), m.view(), v.view(), bf16.view()}}, p, 5,
                          gpu_f64_scalar(norm_sq));
    EXPECT_TRUE(matches(param, ref.param, kUpdate));
    EXPECT_TRUE(matches(m, ref.m, kUpdate));
    EXPECT_TRUE(matches(v, ref.v, kUpdate));
    EXPECT_TRUE(matches(bf16, ref.param, output_tolerance(DType::bf16, kUpdate)));
  }
}

// A readback made before more work is queued holds the value as it was then, and reading it does not wait for the
// later work; readbacks dropped unread return their slots only when their copies are done (many in a row).
TEST(CudaHostReadback, ReadsTheValueAtItsPointInTheStream) {
  VLM_SKIP_WITHOUT_CUDA();
  Tensor x = gpu_f64_scalar(1.5);
  const ops::HostReadback first(x);
  Tensor big = to_gpu(random_normal({1 << 22}, 4), DType::f32);
  Tensor out = gpu_f64_scalar(0.0);
  for (int i = 0; i < 20; ++i) ops::sum_of_squares(out, {big});  // work queued after the copy
  ops::sum(x, to_gpu(Tensor::full({4}, 1.f), DType::f32));          // x becomes 4
  EXPECT_EQ(first.scalar_f64(), 1.5);
  EXPECT_EQ(ops::HostReadback(x).scalar_f64(), 4.0);
  for (int i = 0; i < 1000; ++i) ops::HostReadback dropped(x);
  EXPECT_EQ(ops::HostReadback(out).scalar_f64(), ops::sum_of_squares({big}));
  const Tensor wide = to_gpu(random_normal({3, 50}, 5), DType::f32);  // over one slot: copied at once
  EXPECT_TRUE(bitwise_equal(ops::HostReadback(wide).get(), wide.to(Device::cpu())));
}

// zero_multi over more tensors than one launch takes, of odd sizes and at odd byte offsets (views of one buffer
// with guard bytes between them): every byte of every tensor zero, every guard byte untouched.
TEST(CudaOptimizer, ZeroMultiZeroesEveryTensorAndNothingElse) {
  VLM_SKIP_WITHOUT_CUDA();
  const int64_t total = 3 << 20;
  Tensor host = Tensor::empty({total}, DType::u8);
  std::memset(host.raw_data(), 0x5a, static_cast<size_t>(total));
  const Tensor buffer = host.to(gpu());
  std::vector<Tensor> views;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t at = 1;
  for (int i = 0; i < 150 && at < total; ++i) {
    const int64_t n = std::min<int64_t>(total - at, i % 10 == 0 ? 200001 : (i * 7919) % 5000);
    views.push_back(buffer.slice(0, at, at + n));
    ranges.emplace_back(at, at + n);
    at += n + 1 + i % 17;  // a guard gap
  }
  ops::zero_multi(views);
  const Tensor back = buffer.to(Device::cpu());
  const auto* b = static_cast<const unsigned char*>(back.raw_data());
  std::vector<char> zeroed(static_cast<size_t>(total), 0);
  for (const auto& [lo, hi] : ranges) std::fill(zeroed.begin() + lo, zeroed.begin() + hi, 1);
  int64_t bad = 0;
  for (int64_t i = 0; i < total; ++i) bad += b[i] != (zeroed[static_cast<size_t>(i)] ? 0 : 0x5a);
  EXPECT_EQ(bad, 0);
}

// Every CUDA op with a reduction, run twice on the same inputs: bit-identical results.
TEST(CudaDeterminism, ReductionsAreBitwiseReproducible) {
  VLM_SKIP_WITHOUT_CUDA();
  const int64_t rows = 1031, cols = 384, vocab = 3001;
  for (DType dt : compute_dtypes()) {
    SCOPED_TRACE(dtype_label(dt));
    const Tensor x = to_gpu(random_normal({rows, cols}, 1), dt), w = to_gpu(random_normal({cols}, 2), dt);
    const Tensor b = to_gpu(random_normal({cols}, 3), dt), dy = to_gpu(random_normal({rows, cols}, 4), dt);
    const Tensor logits = to_gpu(random_normal({rows, vocab}, 5, 3.f), dt);
    std::vector<int32_t> ids(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * i) % 97);
    const Tensor ids_g = gpu_i32(ids);
    auto run = [&] {
      Tensor y = Tensor::empty(x.shape(), dt, gpu()), mean = Tensor::empty({rows}, DType::f32, gpu());
      Tensor rstd = Tensor::empty({rows}, DType::f32, gpu()), dx = Tensor::empty(x.shape(), dt, gpu());
      Tensor dw = Tensor::zeros({cols}, DType::f32, gpu()), db = Tensor::zeros({cols}, DType::f32, gpu());
      ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5f);
      ops::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd);
      Tensor rms_dw = Tensor::zeros({cols}, DType::f32, gpu()), rms_dx = Tensor::empty(x.shape(), dt, gpu());
      ops::rmsnorm_forward(y, rstd, x, w, 1e-5f);
      ops::rmsnorm_backward(rms_dx, rms_dw, dy, x, w, rstd);
      Tensor dtable = Tensor::zeros({97, cols}, DType::f32, gpu()), dpos = Tensor::zeros({1, cols}, DType::f32, gpu());
      ops::embedding_backward(dtable, dy, ids_g);
      ops::add_rows_broadcast_backward(dpos, dy);
      Tensor losses = Tensor::empty({rows}, DType::f32, gpu()), dlogits = Tensor::empty(logits.shape(), dt, gpu());
      ops::cross_entropy_forward_backward(losses, dlogits, logits, ids_g, 0.5f, -100);
      std::vector<Tensor> outs;
      for (const Tensor& t : {y, mean, rstd, dx, dw, db, rms_dw, rms_dx, dtable, dpos, losses, dlogits})
        outs.push_back(t.to(Device::cpu()));
      return outs;
    };
    const std::vector<Tensor> first = run(), second = run();
    for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(bitwise_equal(first[i], second[i])) << "output " << i;
  }
}

TEST(CudaDispatch, SupportsEveryOpOnCuda) {
  for (const char* op : {"matmul", "linear_gelu_forward", "add_rmsnorm_backward", "attention_backward",
                         "cross_entropy_forward_backward", "embedding_backward", "adamw_step_multi", "cast",
                         "sum_of_squares", "sum", "zero_multi"}) {
    EXPECT_TRUE(ops::supports(op, Device::cuda(0))) << op;
    EXPECT_TRUE(ops::supports(op, Device::cpu())) << op;
  }
  EXPECT_FALSE(ops::supports("no_such_op", Device::cuda(0)));
}

}  // namespace
}  // namespace vlm::testing
