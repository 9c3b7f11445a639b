// The ops on packed projections against their compositions of existing ops: qkv_split_forward == column slices +
// rope_forward, qkv_split_backward == rope_backward + column concatenation (bit for bit), the backward is the
// transpose of the forward (float64 dot-product test), swiglu_packed == swiglu_forward/backward on the halves (bit for
// bit), and malformed calls abort naming the op.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

// Columns [c0, c1) of a CPU f32 matrix [rows, cols], as a contiguous [rows, c1 - c0] copy.
Tensor columns(const Tensor& m, int64_t c0, int64_t c1) {
  const int64_t rows = m.dim(0), cols = m.dim(1);
  Tensor out = Tensor::empty({rows, c1 - c0}, DType::f32);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = c0; c < c1; ++c) out.data<float>()[r * (c1 - c0) + c - c0] = m.data<float>()[r * cols + c];
  return out;
}

// The matrix [rows, sum of widths] whose column blocks are the given [rows, ...] tensors (any shape, rows first).
Tensor concat_columns(const std::vector<Tensor>& parts) {
  const int64_t rows = parts[0].dim(0);
  int64_t cols = 0;
  for (const Tensor& p : parts) cols += p.numel() / rows;
  Tensor out = Tensor::empty({rows, cols}, DType::f32);
  int64_t c0 = 0;
  for (const Tensor& p : parts) {
    const int64_t w = p.numel() / rows;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < w; ++c) out.data<float>()[r * cols + c0 + c] = p.data<float>()[r * w + c];
    c0 += w;
  }
  return out;
}

double dot64(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    s += static_cast<double>(a.data<float>()[i]) * static_cast<double>(b.data<float>()[i]);
  return s;
}

double abs_dot64(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    s += std::fabs(static_cast<double>(a.data<float>()[i]) * static_cast<double>(b.data<float>()[i]));
  return s;
}

struct QkvCase {
  int64_t tokens, heads_q, heads_kv, dim;
  float theta;
};
// GQA ratios 1, 3, 4 and 8; the model's text (9/3 heads, D 64, theta 1e5) and vision (12/12, theta 0) shapes with
// odd T; D = 2 and 6; T = 1; one case large enough for the OpenMP path.
const QkvCase kQkvCases[] = {{1, 1, 1, 2, 10000.f},   {17, 9, 3, 64, 100000.f}, {5, 4, 4, 6, 10000.f},
                             {33, 6, 2, 8, 500.f},     {7, 8, 1, 16, 10000.f},   {13, 12, 12, 64, 0.f},
                             {3, 3, 1, 2, 100000.f},   {9, 2, 2, 6, 0.f},        {101, 8, 2, 32, 10000.f}};

std::vector<int32_t> random_positions(int64_t tokens, uint64_t seed) {
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  Philox rng(seed);
  for (auto& p : pos) p = static_cast<int32_t>(rng.uniform_int(12000));  // up to the text sequence lengths
  return pos;
}

// Positions of a case: undefined with theta == 0 (no rotation needs none).
Tensor case_positions(const QkvCase& c, uint64_t seed) {
  return c.theta > 0.f ? i32_tensor(random_positions(c.tokens, seed)) : Tensor();
}

std::string describe(const QkvCase& c) {
  return ::testing::PrintToString(c.tokens) + "x(" + ::testing::PrintToString(c.heads_q) + "+2x" +
         ::testing::PrintToString(c.heads_kv) + ")x" + ::testing::PrintToString(c.dim) + " theta " +
         ::testing::PrintToString(c.theta);
}

// q, k, v of the composition: column slices of qkv, then rope_forward on q and k (theta > 0).
void split_by_composition(const QkvCase& c, const Tensor& qkv, const Tensor& positions, Tensor& q, Tensor& k,
                          Tensor& v) {
  const int64_t qc = c.heads_q * c.dim, kc = c.heads_kv * c.dim;
  q = columns(qkv, 0, qc).view({c.tokens, c.heads_q, c.dim});
  k = columns(qkv, qc, qc + kc).view({c.tokens, c.heads_kv, c.dim});
  v = columns(qkv, qc + kc, qc + 2 * kc).view({c.tokens, c.heads_kv, c.dim});
  if (c.theta > 0.f) {
    ops::rope_forward(q, positions, c.theta);
    ops::rope_forward(k, positions, c.theta);
  }
}

TEST(QkvSplit, ForwardEqualsSlicesAndRopeBitForBit) {
  uint64_t seed = 1;
  for (const QkvCase& c : kQkvCases) {
    SCOPED_TRACE(describe(c));
    const Tensor qkv = random_normal({c.tokens, (c.heads_q + 2 * c.heads_kv) * c.dim}, seed++);
    const Tensor positions = case_positions(c, seed++);
    Tensor q_ref, k_ref, v_ref;
    split_by_composition(c, qkv, positions, q_ref, k_ref, v_ref);
    Tensor q = nan_tensor(q_ref.shape()), k = nan_tensor(k_ref.shape()), v = nan_tensor(v_ref.shape());
    const Tensor qkv_before = qkv.clone();
    ops::qkv_split_forward(q, k, v, qkv, positions, c.theta);
    EXPECT_TRUE(bitwise_equal(q, q_ref));
    EXPECT_TRUE(bitwise_equal(k, k_ref));
    EXPECT_TRUE(bitwise_equal(v, v_ref));
    EXPECT_TRUE(bitwise_equal(qkv, qkv_before));  // the input is not touched
  }
}

TEST(QkvSplit, BackwardEqualsRopeBackwardAndConcatenationBitForBit) {
  uint64_t seed = 100;
  for (const QkvCase& c : kQkvCases) {
    SCOPED_TRACE(describe(c));
    const Tensor dq = random_normal({c.tokens, c.heads_q, c.dim}, seed++);
    const Tensor dk = random_normal({c.tokens, c.heads_kv, c.dim}, seed++);
    const Tensor dv = random_normal({c.tokens, c.heads_kv, c.dim}, seed++);
    const Tensor positions = case_positions(c, seed++);
    Tensor dq_rot = dq.clone(), dk_rot = dk.clone();
    if (c.theta > 0.f) {
      ops::rope_backward(dq_rot, positions, c.theta);
      ops::rope_backward(dk_rot, positions, c.theta);
    }
    const Tensor expect = concat_columns({dq_rot, dk_rot, dv});
    const Tensor dq0 = dq.clone(), dk0 = dk.clone(), dv0 = dv.clone();
    Tensor dqkv = nan_tensor(expect.shape());
    ops::qkv_split_backward(dqkv, dq, dk, dv, positions, c.theta);
    EXPECT_TRUE(bitwise_equal(dqkv, expect));
    // dq, dk, dv are inputs only.
    EXPECT_TRUE(bitwise_equal(dq, dq0));
    EXPECT_TRUE(bitwise_equal(dk, dk0));
    EXPECT_TRUE(bitwise_equal(dv, dv0));
  }
}

// <split(x), (dq, dk, dv)> == <x, split^T(dq, dk, dv)>: the backward is the forward's transpose (the rotations are
// orthogonal up to f32 rounding of cos/sin, so the two sides agree to a few f32 ulps of the summed magnitudes).
TEST(QkvSplit, BackwardIsTheTransposeOfTheForward) {
  uint64_t seed = 200;
  for (const QkvCase& c : kQkvCases) {
    SCOPED_TRACE(describe(c));
    const Tensor x = random_normal({c.tokens, (c.heads_q + 2 * c.heads_kv) * c.dim}, seed++);
    const Tensor dq = random_normal({c.tokens, c.heads_q, c.dim}, seed++);
    const Tensor dk = random_normal({c.tokens, c.heads_kv, c.dim}, seed++);
    const Tensor dv = random_normal({c.tokens, c.heads_kv, c.dim}, seed++);
    const Tensor positions = case_positions(c, seed++);
    Tensor q = nan_tensor(dq.shape()), k = nan_tensor(dk.shape()), v = nan_tensor(dv.shape());
    ops::qkv_split_forward(q, k, v, x, positions, c.theta);
    Tensor dx = nan_tensor(x.shape());
    ops::qkv_split_backward(dx, dq, dk, dv, positions, c.theta);
    const double lhs = dot64(q, dq) + dot64(k, dk) + dot64(v, dv), rhs = dot64(x, dx);
    const double scale = abs_dot64(q, dq) + abs_dot64(k, dk) + abs_dot64(v, dv);
    EXPECT_NEAR(lhs, rhs, 1e-6 * scale + 1e-12) << "scale " << scale;
  }
}

// A wrong rotation direction in the backward passes the composition test only if rope_backward has the same bug; the
// transpose test above catches that, and here a forward then backward returns the input (rotation, then its inverse).
TEST(QkvSplit, BackwardOfForwardReturnsTheInput) {
  const QkvCase c{19, 9, 3, 64, 100000.f};
  const Tensor x = random_normal({c.tokens, (c.heads_q + 2 * c.heads_kv) * c.dim}, 300);
  const Tensor positions = case_positions(c, 301);
  Tensor q = nan_tensor({c.tokens, c.heads_q, c.dim}), k = nan_tensor({c.tokens, c.heads_kv, c.dim});
  Tensor v = nan_tensor(k.shape()), back = nan_tensor(x.shape());
  ops::qkv_split_forward(q, k, v, x, positions, c.theta);
  ops::qkv_split_backward(back, q, k, v, positions, c.theta);
  EXPECT_TRUE(all_close(back, x, 1e-5, 1e-6));
}

TEST(QkvSplit, ThetaZeroIsAPureSplitAndIgnoresPositions) {
  const QkvCase c{11, 4, 2, 6, 0.f};
  const Tensor qkv = random_normal({c.tokens, (c.heads_q + 2 * c.heads_kv) * c.dim}, 400);
  const int64_t qc = c.heads_q * c.dim, kc = c.heads_kv * c.dim;
  for (const Tensor& positions : {Tensor(), i32_tensor(random_positions(c.tokens, 401))}) {
    SCOPED_TRACE(positions.defined() ? "positions given" : "no positions");
    Tensor q = nan_tensor({c.tokens, c.heads_q, c.dim}), k = nan_tensor({c.tokens, c.heads_kv, c.dim});
    Tensor v = nan_tensor(k.shape());
    ops::qkv_split_forward(q, k, v, qkv, positions, 0.f);
    EXPECT_TRUE(bitwise_equal(q.view({c.tokens, qc}), columns(qkv, 0, qc)));
    EXPECT_TRUE(bitwise_equal(k.view({c.tokens, kc}), columns(qkv, qc, qc + kc)));
    EXPECT_TRUE(bitwise_equal(v.view({c.tokens, kc}), columns(qkv, qc + kc, qc + 2 * kc)));
    Tensor dqkv = nan_tensor(qkv.shape());
    ops::qkv_split_backward(dqkv, q, k, v, positions, 0.f);
    EXPECT_TRUE(bitwise_equal(dqkv, qkv));
  }
}

TEST(QkvSplit, ResultsDoNotDependOnTheThreadCount) {
  const QkvCase c{257, 9, 3, 64, 100000.f};
  const Tensor qkv = random_normal({c.tokens, (c.heads_q + 2 * c.heads_kv) * c.dim}, 500);
  const Tensor positions = case_positions(c, 501);
  auto run = [&](int threads) {
    Tensor q = nan_tensor({c.tokens, c.heads_q, c.dim}), k = nan_tensor({c.tokens, c.heads_kv, c.dim});
    Tensor v = nan_tensor(k.shape()), dqkv = nan_tensor(qkv.shape());
    with_threads(threads, [&] {
      ops::qkv_split_forward(q, k, v, qkv, positions, c.theta);
      ops::qkv_split_backward(dqkv, q, k, v, positions, c.theta);
    });
    return std::vector<Tensor>{q, k, v, dqkv};
  };
  const std::vector<Tensor> one = run(1), two = run(2);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(bitwise_equal(one[i], two[i])) << i;
}

// Gate values spanning the saturating range, including the extremes.
Tensor packed_gate_up(int64_t rows, int64_t inner, uint64_t seed) {
  Tensor gu = random_normal({rows, 2 * inner}, seed, 3.f);
  float* g = gu.data<float>();
  g[0] = -20.f;
  if (inner > 1) g[1] = 0.f;
  if (inner > 2) g[2] = 15.f;
  return gu;
}

const int64_t kSwigluShapes[][2] = {{1, 1}, {3, 5}, {17, 33}, {64, 1536}, {5, 4099}};

TEST(SwigluPacked, ForwardEqualsSwigluOnTheHalvesBitForBit) {
  uint64_t seed = 600;
  for (const auto& s : kSwigluShapes) {
    const int64_t rows = s[0], inner = s[1];
    SCOPED_TRACE(::testing::Message() << rows << "x" << inner);
    const Tensor gu = packed_gate_up(rows, inner, seed++);
    Tensor expect = nan_tensor({rows, inner});
    ops::swiglu_forward(expect, columns(gu, 0, inner), columns(gu, inner, 2 * inner));
    Tensor y = nan_tensor({rows, inner});
    ops::swiglu_packed_forward(y, gu);
    EXPECT_TRUE(bitwise_equal(y, expect));
  }
}

TEST(SwigluPacked, BackwardEqualsSwigluBackwardOnTheHalvesBitForBit) {
  uint64_t seed = 700;
  for (const auto& s : kSwigluShapes) {
    const int64_t rows = s[0], inner = s[1];
    SCOPED_TRACE(::testing::Message() << rows << "x" << inner);
    const Tensor gu = packed_gate_up(rows, inner, seed++), dy = random_normal({rows, inner}, seed++);
    Tensor dgate = nan_tensor({rows, inner}), dup = nan_tensor({rows, inner});
    ops::swiglu_backward(dgate, dup, dy, columns(gu, 0, inner), columns(gu, inner, 2 * inner));
    const Tensor expect = concat_columns({dgate, dup});
    Tensor dgu = nan_tensor(gu.shape());
    ops::swiglu_packed_backward(dgu, dy, gu);
    EXPECT_TRUE(bitwise_equal(dgu, expect));
    // In place: the gradient replaces the saved projection.
    Tensor in_place = gu.clone();
    ops::swiglu_packed_backward(in_place, dy, in_place);
    EXPECT_TRUE(bitwise_equal(in_place, expect));
  }
}

TEST(SwigluPacked, LeadingDimsFlattenIntoRows) {
  const Tensor gu = random_normal({2, 3, 10}, 800), dy = random_normal({2, 3, 5}, 801);
  Tensor y = nan_tensor({2, 3, 5}), y2 = nan_tensor({6, 5});
  ops::swiglu_packed_forward(y, gu);
  ops::swiglu_packed_forward(y2, gu.view({6, 10}));
  EXPECT_TRUE(bitwise_equal(y.view({6, 5}), y2));
  Tensor dgu = nan_tensor({2, 3, 10}), dgu2 = nan_tensor({6, 10});
  ops::swiglu_packed_backward(dgu, dy, gu);
  ops::swiglu_packed_backward(dgu2, dy.view({6, 5}), gu.view({6, 10}));
  EXPECT_TRUE(bitwise_equal(dgu.view({6, 10}), dgu2));
}

TEST(PackedOps, EmptyInputsAreNoOps) {
  Tensor none;
  Tensor q = Tensor::empty({0, 2, 4}, DType::f32), k = Tensor::empty({0, 1, 4}, DType::f32);
  Tensor v = Tensor::empty({0, 1, 4}, DType::f32), qkv = Tensor::empty({0, 16}, DType::f32);
  ops::qkv_split_forward(q, k, v, qkv, i32_tensor({}), 10000.f);
  ops::qkv_split_backward(qkv, q, k, v, none, 0.f);
  Tensor y = Tensor::empty({0, 3}, DType::f32), gu = Tensor::empty({0, 6}, DType::f32);
  ops::swiglu_packed_forward(y, gu);
  ops::swiglu_packed_backward(gu, y, gu);
}

struct Misuse {
  const char* what;
  const char* message;  // regex the abort message must match (after "ops::<op>: ")
  std::function<void()> call;
};

TEST(PackedOps, MalformedCallsAbortNamingTheOpAndTensor) {
  use_threadsafe_death_tests();
  auto f32 = [](const Shape& s) { return Tensor::zeros(s, DType::f32); };
  auto i32 = [](const Shape& s) { return Tensor::zeros(s, DType::i32); };
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  Tensor none;
  // T = 3, Hq = 2, Hkv = 1, D = 4: qkv [3, 16].
  Tensor q = f32({3, 2, 4}), k = f32({3, 1, 4}), v = f32({3, 1, 4});
  const Tensor qkv = f32({3, 16}), pos = i32({3});
  // One buffer holding qkv, then q: q overlapping qkv when shifted back.
  Tensor buffer = f32({48 + 24});
  const Tensor qkv_in_buffer = buffer.slice(0, 0, 48).view({3, 16});
  Tensor q_overlapping = buffer.slice(0, 40, 64).view({3, 2, 4});
  Tensor y = f32({3, 5}), gu = f32({3, 10}), dy = f32({3, 5});
  Tensor gu_buffer = f32({40});
  Tensor gu_shifted = gu_buffer.slice(0, 10, 40).view({3, 10}), dgu_shifted = gu_buffer.slice(0, 0, 30).view({3, 10});
  const std::vector<Misuse> cases = {
      {"odd head dim", "qkv_split_forward: q is f32\\[3, 2, 5\\] cpu, head dim must be even",
       [&] {
         Tensor q5 = f32({3, 2, 5}), k5 = f32({3, 1, 5}), v5 = f32({3, 1, 5});
         ops::qkv_split_forward(q5, k5, v5, f32({3, 20}), pos, 1e4f);
       }},
      {"qkv width", "qkv_split_forward: qkv is f32\\[3, 12\\] cpu, expected shape \\[3, 16\\]",
       [&] { ops::qkv_split_forward(q, k, v, f32({3, 12}), pos, 1e4f); }},
      {"qkv 3-D", "qkv_split_forward: qkv is f32\\[3, 4, 4\\] cpu, expected shape \\[3, 16\\]",
       [&] { ops::qkv_split_forward(q, k, v, f32({3, 4, 4}), pos, 1e4f); }},
      {"k tokens", "qkv_split_forward: k is f32\\[2, 1, 4\\] cpu, expected shape \\[3, 1, 4\\]",
       [&] {
         Tensor k2 = f32({2, 1, 4});
         ops::qkv_split_forward(q, k2, v, qkv, pos, 1e4f);
       }},
      {"v heads", "qkv_split_forward: v is f32\\[3, 2, 4\\] cpu, expected shape \\[3, 1, 4\\]",
       [&] {
         Tensor v2 = f32({3, 2, 4});
         ops::qkv_split_forward(q, k, v2, f32({3, 20}), pos, 1e4f);
       }},
      {"q 2-D", "qkv_split_forward: q is f32\\[3, 8\\] cpu, expected 3-D",
       [&] {
         Tensor q2 = f32({3, 8});
         ops::qkv_split_forward(q2, k, v, qkv, pos, 1e4f);
       }},
      {"negative theta", "qkv_split_forward: theta is -1", [&] { ops::qkv_split_forward(q, k, v, qkv, pos, -1.f); }},
      {"NaN theta", "qkv_split_forward: theta is nan", [&] { ops::qkv_split_forward(q, k, v, qkv, pos, kNaN); }},
      {"missing positions", "qkv_split_forward: positions is undefined",
       [&] { ops::qkv_split_forward(q, k, v, qkv, none, 1e4f); }},
      {"positions length", "qkv_split_forward: positions is i32\\[4\\] cpu, expected shape \\[3\\]",
       [&] { ops::qkv_split_forward(q, k, v, qkv, i32({4}), 1e4f); }},
      {"positions length, theta 0", "qkv_split_forward: positions is i32\\[2\\] cpu",
       [&] { ops::qkv_split_forward(q, k, v, qkv, i32({2}), 0.f); }},
      {"positions dtype", "qkv_split_forward: positions is f32\\[3\\] cpu, expected dtype i32",
       [&] { ops::qkv_split_forward(q, k, v, qkv, f32({3}), 1e4f); }},
      {"bf16 on the CPU", "qkv_split_forward: q is bf16\\[3, 2, 4\\] cpu, expected dtype f32",
       [&] {
         Tensor qb = Tensor::zeros({3, 2, 4}, DType::bf16);
         ops::qkv_split_forward(qb, k, v, qkv, pos, 1e4f);
       }},
      {"mixed dtypes", "qkv_split_forward: qkv is bf16\\[3, 16\\] cpu, expected dtype f32",
       [&] { ops::qkv_split_forward(q, k, v, Tensor::zeros({3, 16}, DType::bf16), pos, 1e4f); }},
      {"non-contiguous qkv", "qkv_split_forward: qkv is .* and not contiguous",
       [&] { ops::qkv_split_forward(q, k, v, f32({3, 20}).slice(1, 0, 16), pos, 1e4f); }},
      {"q overlaps qkv", "qkv_split_forward: q \\(f32\\[3, 2, 4\\] cpu\\) overlaps qkv",
       [&] { ops::qkv_split_forward(q_overlapping, k, v, qkv_in_buffer, pos, 1e4f); }},
      {"k is v", "qkv_split_forward: k \\(f32\\[3, 1, 4\\] cpu\\) overlaps v",
       [&] { ops::qkv_split_forward(q, k, k, qkv, pos, 1e4f); }},
      {"dqkv shape", "qkv_split_backward: dqkv is f32\\[3, 15\\] cpu, expected shape \\[3, 16\\]",
       [&] {
         Tensor d = f32({3, 15});
         ops::qkv_split_backward(d, q, k, v, pos, 1e4f);
       }},
      {"dv shape", "qkv_split_backward: dv is f32\\[3, 1, 2\\] cpu, expected shape \\[3, 1, 4\\]",
       [&] {
         Tensor d = f32({3, 16});
         ops::qkv_split_backward(d, q, k, f32({3, 1, 2}), pos, 1e4f);
       }},
      {"dq overlaps dqkv", "qkv_split_backward: dq \\(f32\\[3, 2, 4\\] cpu\\) overlaps dqkv",
       [&] {
         Tensor d = qkv_in_buffer;
         ops::qkv_split_backward(d, q_overlapping, k, v, pos, 1e4f);
       }},
      {"backward positions", "qkv_split_backward: positions is undefined",
       [&] {
         Tensor d = f32({3, 16});
         ops::qkv_split_backward(d, q, k, v, none, 1e4f);
       }},
      {"gu width", "swiglu_packed_forward: gu is f32\\[3, 9\\] cpu, expected shape \\[3, 10\\]",
       [&] { ops::swiglu_packed_forward(y, f32({3, 9})); }},
      {"gu rows", "swiglu_packed_forward: gu is f32\\[4, 10\\] cpu, expected shape \\[3, 10\\]",
       [&] { ops::swiglu_packed_forward(y, f32({4, 10})); }},
      {"gu dtype", "swiglu_packed_forward: gu is i32\\[3, 10\\] cpu, expected dtype f32",
       [&] { ops::swiglu_packed_forward(y, i32({3, 10})); }},
      {"y undefined", "swiglu_packed_forward: y is undefined", [&] { ops::swiglu_packed_forward(none, gu); }},
      {"y overlaps gu", "swiglu_packed_forward: y \\(f32\\[3, 5\\] cpu\\) overlaps gu",
       [&] {
         Tensor y_in = gu_buffer.slice(0, 0, 15).view({3, 5});
         ops::swiglu_packed_forward(y_in, gu_buffer.slice(0, 10, 40).view({3, 10}));
       }},
      {"dgu shape", "swiglu_packed_backward: dgu is f32\\[3, 5\\] cpu, expected shape \\[3, 10\\]",
       [&] {
         Tensor d = f32({3, 5});
         ops::swiglu_packed_backward(d, dy, gu);
       }},
      {"dy shape", "swiglu_packed_backward: gu is f32\\[3, 10\\] cpu, expected shape \\[3, 8\\]",
       [&] {
         Tensor d = f32({3, 10});
         ops::swiglu_packed_backward(d, f32({3, 4}), gu);
       }},
      {"dgu overlaps dy", "swiglu_packed_backward: dgu \\(f32\\[3, 10\\] cpu\\) overlaps dy",
       [&] { ops::swiglu_packed_backward(dgu_shifted, gu_buffer.slice(0, 25, 40).view({3, 5}), gu); }},
      {"dgu partly overlaps gu", "swiglu_packed_backward: dgu overlaps gu \\(only dgu == gu",
       [&] { ops::swiglu_packed_backward(dgu_shifted, dy, gu_shifted); }},
  };
  for (const Misuse& m : cases) {
    SCOPED_TRACE(m.what);
    EXPECT_DEATH(m.call(), std::string("ops::") + m.message);
  }
}

}  // namespace
}  // namespace vlm::testing
