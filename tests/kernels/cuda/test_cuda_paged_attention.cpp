// The paged KV cache ops on CUDA against the CPU reference on random problems: block tables with shuffled,
// non-contiguous blocks and NaN in every slot the op must not read; GQA ratios 1, 3 (SmolLM2-135M: 9 q heads over 3
// kv heads) and 8; head dims 64 and 128 (the decode kernel) and others (the general kernel); context lengths from 1
// to 8192, multiples of the block size and not; decode at batch 1 (split context, merged by the last split block)
// and larger batches, with exact and loose max_context_len bounds (a CUDA graph captured for a bound: splits past a
// context are empty); chunked prefill; f32 and bf16. Split decode repeats bit for bit, eagerly and as graph replays
// (the split tickets are left zero by every call).
// Outputs start NaN with NaN guards around them: every element must be written, nothing past either end.
// The CPU op runs on the bf16-rounded inputs, so tolerances cover only the GPU's summation order, its exp2 and the
// output's rounding (and, for bf16 prefill on FlashAttention, its bf16 rounding of the probabilities).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <memory>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/paged_inputs.h"

namespace vlm::testing {
namespace {

const PagedCase kCases[] = {
    {"decode_b1_ctx1", {1}, {1}, 9, 3, 64, 16},
    {"decode_b1_ctx4096_split", {4096}, {1}, 9, 3, 64, 16},
    {"decode_b1_ctx4001_d128_gqa8", {4001}, {1}, 8, 1, 128, 16},
    {"decode_smollm_batch", {1, 15, 16, 17, 640, 513, 33, 100}, {1, 1, 1, 1, 1, 1, 1, 1}, 9, 3, 64, 16},
    {"decode_mha_d128", {300, 7, 64}, {1, 1, 1}, 4, 4, 128, 16},
    {"decode_b1_ctx300_mha_d64", {300}, {1}, 2, 2, 64, 16},
    {"decode_b1_ctx1111_gqa3_d128", {1111}, {1}, 6, 2, 128, 16},
    {"decode_b1_ctx2000_gqa4_d128", {2000}, {1}, 8, 2, 128, 16},
    {"decode_b1_ctx8192_gqa8_d64", {8192}, {1}, 8, 1, 64, 16},  // the most splits, kMaxSplits
    {"decode_gqa8_d64_row_empty", {1500, 37, 900}, {1, 0, 1}, 8, 1, 64, 16},
    {"decode_gqa8_d64_bs32", {77, 1000}, {1, 1}, 16, 2, 64, 32},
    {"decode_group9_general", {50, 3}, {1, 1}, 9, 1, 64, 16},  // 9 q heads per kv head: the general kernel
    {"decode_d40_general", {129, 2}, {1, 1}, 6, 2, 40, 16},
    {"decode_some_rows_empty", {20, 9, 31}, {1, 0, 1}, 9, 3, 64, 16},
    {"prefill_chunks", {12, 9, 31}, {12, 4, 7}, 4, 2, 16, 8},
    {"prefill_smollm", {512, 200, 77}, {512, 64, 1}, 9, 3, 64, 16},
    {"prefill_d128_gqa8", {300, 129}, {100, 129}, 8, 1, 128, 16},
};

struct GpuProblem {
  Tensor q, k_cache, v_cache, block_tables, context_lens, cu_q;
};

GpuProblem upload(const PagedInputs& in, DType dt) {
  return {to_gpu(in.q, dt), to_gpu(in.k_cache, dt), to_gpu(in.v_cache, dt), in.block_tables.to(gpu()),
          in.context_lens.to(gpu()), in.cu_q.to(gpu())};
}

// The CPU reference on the inputs as the GPU sees them (rounded to dt).
Tensor cpu_reference(const PagedInputs& in, DType dt) {
  Tensor out = Tensor::empty(in.q.shape(), DType::f32);
  ops::paged_attention(out, rounded(in.q, dt), rounded(in.k_cache, dt), rounded(in.v_cache, dt), in.block_tables,
                       in.context_lens, in.cu_q, in.max_q, in.max_ctx, in.scale);
  return out;
}

TEST(CudaPagedAttention, MatchesCpu) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 100;
  for (DType dt : compute_dtypes())
    for (const PagedCase& c : kCases)
      for (int bound_slack : {0, 3000}) {  // max_context_len exact, and a loose bound (more, emptier splits)
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " " << c.name << " bound +" << bound_slack);
        const PagedInputs in = make_paged_inputs(c, seed += 10);
        const Tensor expect = cpu_reference(in, dt);
        const GpuProblem g = upload(in, dt);
        Guarded out(in.q.shape(), dt);
        ops::paged_attention(out.view(), g.q, g.k_cache, g.v_cache, g.block_tables, g.context_lens, g.cu_q, in.max_q,
                             in.max_ctx + bound_slack, in.scale);
        const bool bf16 = dt == DType::bf16;
        // bf16 prefill runs FlashAttention, which rounds P to bf16 for its tensor-core matmul: the bound of
        // test_cuda_attention's flash cases.
        EXPECT_TRUE(close_scaled(out, expect, bf16 ? 4 * kBf16HalfUlp : 2e-5, bf16 ? 2 * kBf16HalfUlp : 1e-6, 1e-6));
      }
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

TEST(CudaPagedAttention, RowStridedQueriesMatchContiguous) {
  VLM_SKIP_WITHOUT_CUDA();
  // q as the column slice of a packed [T, Hq + 2 Hkv, D] projection (what the model's qkv GEMM writes).
  for (DType dt : compute_dtypes())
    for (const PagedCase& c : {PagedCase{"decode", {700, 5}, {1, 1}, 9, 3, 64, 16},
                               PagedCase{"prefill", {40, 17}, {40, 2}, 9, 3, 64, 16}}) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " " << c.name);
      const PagedInputs in = make_paged_inputs(c, 7);
      const GpuProblem g = upload(in, dt);
      const int64_t t = in.q.dim(0), hq = c.heads_q, hall = hq + 2 * c.heads_kv, d = c.dim;
      Tensor packed_host = random_normal({t, hall, d}, 8);
      for (int64_t i = 0; i < t; ++i)
        std::copy_n(in.q.data<float>() + i * hq * d, hq * d, packed_host.data<float>() + i * hall * d);
      const Tensor packed = to_gpu(packed_host, dt), q_view = packed.slice(1, 0, hq);
      ASSERT_FALSE(q_view.is_contiguous());
      Tensor a = Tensor::empty(in.q.shape(), dt, gpu()), b = Tensor::empty(in.q.shape(), dt, gpu());
      ops::paged_attention(a, g.q, g.k_cache, g.v_cache, g.block_tables, g.context_lens, g.cu_q, in.max_q,
                           in.max_ctx, in.scale);
      ops::paged_attention(b, q_view, g.k_cache, g.v_cache, g.block_tables, g.context_lens, g.cu_q, in.max_q,
                           in.max_ctx, in.scale);
      EXPECT_TRUE(bitwise_equal(a.to(Device::cpu()), b.to(Device::cpu())));
    }
}

TEST(CudaPagedAttention, RepeatsBitForBit) {
  VLM_SKIP_WITHOUT_CUDA();
  const PagedInputs in = make_paged_inputs({"rep", {3000, 17, 640}, {1, 1, 1}, 9, 3, 64, 16}, 3);
  for (DType dt : compute_dtypes()) {
    const GpuProblem g = upload(in, dt);
    auto run = [&] {
      Tensor out = Tensor::empty(in.q.shape(), dt, gpu());
      ops::paged_attention(out, g.q, g.k_cache, g.v_cache, g.block_tables, g.context_lens, g.cu_q, in.max_q,
                           in.max_ctx, in.scale);
      return out.to(Device::cpu());
    };
    EXPECT_TRUE(bitwise_equal(run(), run())) << dtype_label(dt);
  }
}

// Split decode calls (contexts cut into splits, the last split block of each sequence and kv head merging them)
// give the same bits eagerly, again, and as CUDA graph replays interleaved with each other and with eager calls
// (all sharing the per-device tickets), and each call is one kernel.
TEST(CudaPagedAttention, SplitDecodeRepeatsEagerlyAndInGraphs) {
  VLM_SKIP_WITHOUT_CUDA();
  if (!ops::OpGraph::supported(gpu())) GTEST_SKIP() << "no CUDA graphs";
  struct Problem {
    PagedCase c;
    int bound_slack;  // max_context_len past the longest context: empty splits
  };
  const Problem problems[] = {{{"graph_b1_gqa3", {1500}, {1}, 9, 3, 64, 16}, 2000},
                              {{"graph_b3_gqa4_d128", {700, 5, 1200}, {1, 1, 1}, 8, 2, 128, 16}, 0},
                              {{"graph_b2_mha_row_empty", {640, 999}, {0, 1}, 4, 4, 64, 32}, 500}};
  for (DType dt : compute_dtypes()) {
    SCOPED_TRACE(dtype_label(dt));
    std::vector<PagedInputs> inputs;
    std::vector<GpuProblem> uploads;
    std::vector<Tensor> outs, eager;
    for (const Problem& p : problems) {
      inputs.push_back(make_paged_inputs(p.c, 41));
      uploads.push_back(upload(inputs.back(), dt));
      outs.push_back(Tensor::empty(inputs.back().q.shape(), dt, gpu()));
    }
    auto call = [&](size_t i) {
      const PagedInputs& in = inputs[i];
      const GpuProblem& g = uploads[i];
      ops::paged_attention(outs[i], g.q, g.k_cache, g.v_cache, g.block_tables, g.context_lens, g.cu_q, in.max_q,
                           in.max_ctx + problems[i].bound_slack, in.scale, /*indices_checked=*/true);
    };
    auto result = [&](size_t i) { return outs[i].to(Device::cpu()); };
    auto poison = [&](size_t i) { ops::fill(outs[i], NAN); };
    for (size_t i = 0; i < std::size(problems); ++i) {
      SCOPED_TRACE(problems[i].c.name);
      poison(i);
      call(i);
      eager.push_back(result(i));
      const Tensor expect = cpu_reference(inputs[i], dt);
      const bool bf16 = dt == DType::bf16;
      const double rtol = bf16 ? 4 * kBf16HalfUlp : 2e-5, floor = (bf16 ? 2 * kBf16HalfUlp : 1e-6) * max_abs(expect);
      EXPECT_TRUE(close_within(to_cpu_f32(eager[i]), expect,
                               [&](int64_t, double e) { return rtol * std::fabs(e) + floor + 1e-6; }));
      poison(i);
      call(i);
      EXPECT_TRUE(bitwise_equal(result(i), eager[i])) << "second eager call";
    }
    ops::GraphPool pool(gpu());
    std::vector<std::unique_ptr<ops::OpGraph>> graphs;
    for (size_t i = 0; i < std::size(problems); ++i) {
      graphs.push_back(std::make_unique<ops::OpGraph>(pool, [&, i] { call(i); }));
      EXPECT_EQ(graphs.back()->nodes(), 1u) << problems[i].c.name << ": one kernel a decode call";
    }
    for (int round = 0; round < 3; ++round)
      for (size_t i = 0; i < std::size(problems); ++i) {
        SCOPED_TRACE(::testing::Message() << problems[i].c.name << " round " << round);
        poison(i);
        graphs[i]->replay();
        EXPECT_TRUE(bitwise_equal(result(i), eager[i])) << "replay";
        const size_t other = (i + 1) % std::size(problems);  // an eager call between replays
        poison(other);
        call(other);
        EXPECT_TRUE(bitwise_equal(result(other), eager[other])) << "eager call between replays";
      }
    graphs.clear();
  }
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

TEST(CudaPagedKvWrite, MatchesCpuWithStridedRowsAndPadding) {
  VLM_SKIP_WITHOUT_CUDA();
  const int64_t num_blocks = 6, bs = 16, hkv = 3, d = 64, hq = 9, t = 37;
  const std::vector<int32_t> slots = [&] {
    std::vector<int32_t> s;
    for (int64_t i = 0; i < t; ++i)
      s.push_back(i % 5 == 2 ? -1 : static_cast<int32_t>((i * 13 + 4) % (num_blocks * bs)));
    return s;
  }();
  for (DType dt : compute_dtypes())
    for (bool strided : {false, true})
      for (int64_t offset : {int64_t{0}, int64_t{1}}) {  // offset 1: misaligned rows take the scalar path
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << (strided ? " strided" : "") << " offset " << offset);
        const Tensor init_k = random_normal({num_blocks, bs, hkv, d}, 1), init_v = random_normal(init_k.shape(), 2);
        const Tensor qkv = random_normal({t, hq + 2 * hkv, d}, 3);
        Tensor k_host = Tensor::empty({t, hkv, d}, DType::f32), v_host = Tensor::empty({t, hkv, d}, DType::f32);
        for (int64_t i = 0; i < t; ++i) {
          std::copy_n(qkv.data<float>() + (i * (hq + 2 * hkv) + hq) * d, hkv * d, k_host.data<float>() + i * hkv * d);
          std::copy_n(qkv.data<float>() + (i * (hq + 2 * hkv) + hq + hkv) * d, hkv * d,
                      v_host.data<float>() + i * hkv * d);
        }
        Tensor k_ref = rounded(init_k, dt), v_ref = rounded(init_v, dt);
        ops::paged_kv_write(k_ref, v_ref, rounded(k_host, dt), rounded(v_host, dt), i32_tensor(slots));

        Tensor k_cache = to_gpu(init_k, dt), v_cache = to_gpu(init_v, dt), k, v;
        if (strided) {
          const Tensor packed = to_gpu_at_offset(qkv, dt, offset);
          k = packed.slice(1, hq, hq + hkv);
          v = packed.slice(1, hq + hkv, hq + 2 * hkv);
        } else {
          k = to_gpu_at_offset(k_host, dt, offset);
          v = to_gpu_at_offset(v_host, dt, offset);
        }
        ops::paged_kv_write(k_cache, v_cache, k, v, gpu_i32(slots));
        EXPECT_TRUE(bitwise_equal(to_cpu_f32(k_cache), k_ref)) << "k_cache";
        EXPECT_TRUE(bitwise_equal(to_cpu_f32(v_cache), v_ref)) << "v_cache";
      }
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

TEST(CudaPagedAttention, BadIndicesAreRecordedAndNamed) {
  VLM_SKIP_WITHOUT_CUDA();
  ASSERT_TRUE(ops::check_index_errors(gpu()).ok());
  const PagedCase c{"errors", {9, 5}, {1, 1}, 9, 3, 64, 4};
  const PagedInputs in = make_paged_inputs(c, 5);
  const GpuProblem g = upload(in, DType::f32);
  Tensor out = Tensor::empty(in.q.shape(), DType::f32, gpu());
  Tensor bad_tables = in.block_tables.clone();
  bad_tables.data<int32_t>()[in.block_tables.dim(1) + 1] = 99;
  ops::paged_attention(out, g.q, g.k_cache, g.v_cache, bad_tables.to(gpu()), g.context_lens, g.cu_q, 1, in.max_ctx,
                       in.scale);
  Status s = ops::check_index_errors(gpu());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("paged_attention (block_tables): entry 5 = 99 is outside [0, 8)"), std::string::npos)
      << s.message();

  ops::paged_attention(out, g.q, g.k_cache, g.v_cache, g.block_tables, gpu_i32({9, 17}), g.cu_q, 1, 20, in.scale);
  s = ops::check_index_errors(gpu());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("paged_attention (context_lens): entry 1 = 17"), std::string::npos) << s.message();

  ops::paged_attention(out, g.q, g.k_cache, g.v_cache, g.block_tables, g.context_lens, gpu_i32({0, 1, 3}), 1,
                       in.max_ctx, in.scale);
  s = ops::check_index_errors(gpu());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("paged_attention (cu_seqlens_q)"), std::string::npos) << s.message();

  // indices_checked skips the check (the caller vouches); the kernels still stay in bounds.
  ops::paged_attention(out, g.q, g.k_cache, g.v_cache, bad_tables.to(gpu()), g.context_lens, g.cu_q, 1, in.max_ctx,
                       in.scale, /*indices_checked=*/true);
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());

  Tensor k_cache = g.k_cache, v_cache = g.v_cache;
  const Tensor rows = to_gpu(random_normal({2, 3, 64}, 9), DType::f32);
  ops::paged_kv_write(k_cache, v_cache, rows, rows, gpu_i32({3, 1000}));
  s = ops::check_index_errors(gpu());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("paged_kv_write (slot_mapping): entry 1 = 1000 is outside [-1, 32)"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace vlm::testing
