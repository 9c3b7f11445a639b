// The checks the CUDA op tests rely on, tested themselves: a NaN or an infinity never passes a comparison (in the
// actual result or in the reference), an output element the op did not write (still the NaN sentinel) fails, and a
// write into the NaN guard elements on either side of an output is caught. The comparison part needs no GPU.
#include <gtest/gtest.h>

#include <limits>

#include "cuda_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor values(const std::vector<float>& v) { return Tensor::from_vector(v, Shape{static_cast<int64_t>(v.size())}); }

TEST(CudaTestChecks, NanAndInfinityNeverPass) {
  const Tensor expected = values({1.f, 2.f, 3.f});
  const auto generous = [](int64_t, double) { return 1e30; };
  EXPECT_TRUE(close_within(values({1.f, 2.f, 3.f}), expected, generous));
  EXPECT_TRUE(all_close(values({1.f, 2.f, 3.f}), expected, 0, 0));
  for (float bad : {kNan, -kNan, kInf, -kInf}) {
    SCOPED_TRACE(::testing::Message() << "bad value " << bad);
    // In the result, even under a bound no finite error reaches.
    const ::testing::AssertionResult r = close_within(values({1.f, bad, 3.f}), expected, generous);
    EXPECT_FALSE(r);
    EXPECT_NE(std::string(r.message()).find("first bad index 1"), std::string::npos) << r.message();
    EXPECT_FALSE(all_close(values({1.f, bad, 3.f}), expected, 1e30, 1e30));
    // In the reference (a broken CPU op must not make everything pass).
    EXPECT_FALSE(close_within(expected, values({1.f, 2.f, bad}), generous));
    EXPECT_FALSE(all_close(expected, values({1.f, 2.f, bad}), 1e30, 1e30));
  }
  // A bound that is itself NaN accepts nothing.
  EXPECT_FALSE(close_within(expected, expected, [](int64_t, double) { return static_cast<double>(kNan); }));
}

TEST(CudaTestChecks, BoundIsInclusiveAndErrorsBeyondItFail) {
  const Tensor expected = values({0.f, 1.f, -4.f});
  EXPECT_TRUE(close_within(values({0.5f, 1.f, -4.f}), expected, [](int64_t, double) { return 0.5; }));
  EXPECT_FALSE(close_within(values({0.f, 1.f, -4.75f}), expected, [](int64_t, double) { return 0.5; }));
  // Relative tolerances scale with the expected value.
  EXPECT_TRUE(all_close(values({0.f, 1.01f, -4.03f}), expected, 0.01, 0));
  EXPECT_FALSE(all_close(values({0.f, 1.f, -4.05f}), expected, 0.01, 0));
}

TEST(CudaTestChecks, UnwrittenElementsAndGuardWritesAreCaught) {
  VLM_SKIP_WITHOUT_CUDA();
  for (DType dt : compute_dtypes()) {
    SCOPED_TRACE(dtype_label(dt));
    const int64_t n = 37;
    const Tensor ones = Tensor::full({n}, 1.f);
    // A NaN-filled output starts out failing; written in full it passes.
    Guarded out(Shape{n}, dt);
    EXPECT_FALSE(matches(out, ones, {0, 0}));
    EXPECT_TRUE(out.guards_intact());
    ops::fill(out.view(), 1.f);
    EXPECT_TRUE(matches(out, ones, {0, 0}));
    // One element left unwritten: caught, at its index.
    Guarded partial(Shape{n}, dt);
    Tensor head = partial.view().slice(0, 0, n - 1);
    ops::fill(head, 1.f);
    const ::testing::AssertionResult r = matches(partial, ones, {1e30, 1e30});
    EXPECT_FALSE(r);
    EXPECT_NE(std::string(r.message()).find("first bad index 36"), std::string::npos) << r.message();
    // A write one element past either end of the output: caught by the guards, even though the output is right.
    const size_t elem = dt == DType::f32 ? 4 : 2;
    for (int side : {-1, 1}) {
      SCOPED_TRACE(side < 0 ? "write before" : "write after");
      Guarded g(Shape{n}, dt);
      auto* base = static_cast<char*>(g.view().raw_data());
      char* start = side < 0 ? base - elem : base;
      Tensor wide = Tensor::borrow(start, Shape{n + 1}, dt, gpu(), nullptr);
      ops::fill(wide, 1.f);
      EXPECT_TRUE(all_close(to_cpu_f32(g.view()), ones, 0, 0));
      EXPECT_FALSE(g.guards_intact());
      EXPECT_FALSE(matches(g, ones, {0, 0}));
    }
  }
}

}  // namespace
}  // namespace vlm::testing
