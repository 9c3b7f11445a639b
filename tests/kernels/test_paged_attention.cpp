// The paged KV cache ops on the CPU: paged_attention against a float64 dense attention over the K/V gathered through
// the block tables (shuffled, non-contiguous blocks; every cache slot the op must not read is NaN, so reading one
// fails), GQA ratios 1/3/8, decode and chunked prefill, context lengths that are not multiples of the block size;
// chunked prefill written with paged_kv_write equals attention_forward over the whole sequences bit for bit;
// qkv_split_paged_write equals qkv_split_forward + paged_kv_write bit for bit; and the errors for bad slots, block
// ids, context lengths and cu_seqlens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "paged_inputs.h"

namespace vlm::testing {
namespace {

const PagedCase kCases[] = {
    {"decode_mha", {1, 5, 16, 17}, {1, 1, 1, 1}, 2, 2, 8, 4},
    {"decode_smollm_gqa3", {33, 1, 100}, {1, 1, 1}, 9, 3, 64, 16},
    {"decode_gqa8_d128", {7, 64}, {1, 1}, 8, 1, 128, 16},
    {"prefill_chunks", {12, 9, 31}, {12, 4, 7}, 4, 2, 16, 8},
    {"prefill_gqa3_bs16", {40, 17}, {40, 1}, 9, 3, 64, 16},
    {"long_decode", {4096, 1000, 4095}, {1, 1, 1}, 3, 1, 64, 16},
    {"block_size_1", {5, 3}, {2, 3}, 2, 1, 4, 1},
};

// Dense attention in float64 over each sequence's keys gathered by slot, bottom-right causal.
Doubles dense_reference(const PagedInputs& in, const PagedCase& c) {
  const Doubles q = to_doubles(in.q), kc = to_doubles(in.k_cache), vc = to_doubles(in.v_cache);
  const std::vector<int32_t> cu = cumulative_lens(c.query_lens);
  const int64_t hq = c.heads_q, hkv = c.heads_kv, d = c.dim, row = hkv * d;
  Doubles out(static_cast<size_t>(in.q.numel()), 0.0);
  for (size_t b = 0; b < c.context_lens.size(); ++b) {
    const int64_t len = c.context_lens[b], lq = c.query_lens[b];
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kvh = h / (hq / hkv);
      for (int64_t i = 0; i < lq; ++i) {
        const int64_t qbase = ((cu[b] + i) * hq + h) * d, n = i + len - lq + 1;
        std::vector<double> s(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) {
          const int64_t kbase = in.slots[b][static_cast<size_t>(j)] * row + kvh * d;
          double dotp = 0;
          for (int64_t e = 0; e < d; ++e)
            dotp += q[static_cast<size_t>(qbase + e)] * kc[static_cast<size_t>(kbase + e)];
          s[static_cast<size_t>(j)] = in.scale * dotp;
        }
        const double m = *std::max_element(s.begin(), s.end());
        double z = 0;
        for (double x : s) z += std::exp(x - m);
        for (int64_t j = 0; j < n; ++j) {
          const double p = std::exp(s[static_cast<size_t>(j)] - m) / z;
          const int64_t vbase = in.slots[b][static_cast<size_t>(j)] * row + kvh * d;
          for (int64_t e = 0; e < d; ++e) out[static_cast<size_t>(qbase + e)] += p * vc[static_cast<size_t>(vbase + e)];
        }
      }
    }
  }
  return out;
}

TEST(PagedAttention, MatchesDenseAttentionOverGatheredKv) {
  uint64_t seed = 10;
  for (const PagedCase& c : kCases) {
    SCOPED_TRACE(c.name);
    const PagedInputs in = make_paged_inputs(c, seed += 10);
    Tensor out = nan_tensor(in.q.shape());
    ops::paged_attention(out, in.q, in.k_cache, in.v_cache, in.block_tables, in.context_lens, in.cu_q, in.max_q,
                         in.max_ctx, in.scale);
    EXPECT_TRUE(all_close(out, from_doubles(dense_reference(in, c), in.q.shape()), 1e-4, 1e-5));
  }
}

// The engine's use: a prompt written chunk by chunk with paged_kv_write, each chunk's queries attending over the
// cache, then decode steps; the outputs equal attention_forward (causal) over the whole sequences, bit for bit
// (same arithmetic, same key order).
TEST(PagedAttention, ChunkedPrefillAndDecodeEqualDenseCausalAttention) {
  const int64_t hq = 6, hkv = 2, d = 32, bs = 4, num_blocks = 40;
  const std::vector<int32_t> total = {23, 9, 14};  // tokens per sequence: prompt chunks, then decode
  const int64_t batch = 3, max_blocks = 8;
  const std::vector<int32_t> cu = cumulative_lens(total);
  const Tensor q = random_normal({cu.back(), hq, d}, 1), k = random_normal({cu.back(), hkv, d}, 2);
  const Tensor v = random_normal({cu.back(), hkv, d}, 3);
  const float scale = 0.17f;
  Tensor expect = nan_tensor(q.shape()), lse = nan_tensor({hq, cu.back()});
  const Tensor cu_t = i32_tensor(cu);
  ops::attention_forward(expect, lse, q, k, v, cu_t, cu_t, 23, 23, scale, true);

  // Blocks handed out in a scrambled order, as a pool that has served other requests would.
  std::vector<int32_t> tables(static_cast<size_t>(batch * max_blocks), -1);
  for (int64_t i = 0; i < batch * max_blocks; ++i)
    tables[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + 3) % num_blocks);
  const Tensor block_tables = i32_tensor(tables).view({batch, max_blocks});
  Tensor k_cache = nan_tensor({num_blocks, bs, hkv, d}), v_cache = nan_tensor({num_blocks, bs, hkv, d});
  Tensor out = nan_tensor(q.shape());
  const int64_t row_q = hq * d, row_kv = hkv * d;
  std::vector<int32_t> done(batch, 0);
  const std::vector<std::vector<int32_t>> steps = {{10, 5, 6}, {7, 0, 6}, {1, 1, 1}, {1, 1, 1}, {1, 1, 0},
                                                   {1, 1, 0}, {1, 0, 0}, {1, 0, 0}};  // tokens per step
  for (const auto& step : steps) {
    // The step's rows of every sequence, packed; their slots, then the attention over each sequence's context.
    std::vector<int32_t> rows, slots, lens_q, ctx;
    for (int64_t b = 0; b < batch; ++b) {
      for (int32_t i = 0; i < step[static_cast<size_t>(b)]; ++i) {
        const int32_t p = done[static_cast<size_t>(b)] + i;
        rows.push_back(cu[static_cast<size_t>(b)] + p);
        slots.push_back(tables[static_cast<size_t>(b * max_blocks + p / bs)] * static_cast<int32_t>(bs) +
                        p % static_cast<int32_t>(bs));
      }
      lens_q.push_back(step[static_cast<size_t>(b)]);
      done[static_cast<size_t>(b)] += step[static_cast<size_t>(b)];
      ctx.push_back(done[static_cast<size_t>(b)]);
    }
    const int64_t n = static_cast<int64_t>(rows.size());
    Tensor qs = Tensor::empty({n, hq, d}, DType::f32), ks = Tensor::empty({n, hkv, d}, DType::f32);
    Tensor vs = Tensor::empty({n, hkv, d}, DType::f32);
    for (int64_t r = 0; r < n; ++r) {
      std::copy_n(q.data<float>() + rows[static_cast<size_t>(r)] * row_q, row_q, qs.data<float>() + r * row_q);
      std::copy_n(k.data<float>() + rows[static_cast<size_t>(r)] * row_kv, row_kv, ks.data<float>() + r * row_kv);
      std::copy_n(v.data<float>() + rows[static_cast<size_t>(r)] * row_kv, row_kv, vs.data<float>() + r * row_kv);
    }
    ops::paged_kv_write(k_cache, v_cache, ks, vs, i32_tensor(slots));
    Tensor os = nan_tensor(qs.shape());
    const int max_q = *std::max_element(lens_q.begin(), lens_q.end());
    ops::paged_attention(os, qs, k_cache, v_cache, block_tables, i32_tensor(ctx), i32_tensor(cumulative_lens(lens_q)),
                         max_q, 23, scale);
    for (int64_t r = 0; r < n; ++r)
      std::copy_n(os.data<float>() + r * row_q, row_q, out.data<float>() + rows[static_cast<size_t>(r)] * row_q);
  }
  EXPECT_TRUE(bitwise_equal(out, expect));
}

TEST(PagedKvWrite, CopiesRowsIntoTheirSlotsAndSkipsPadding) {
  const int64_t num_blocks = 3, bs = 4, hkv = 2, d = 3, row = hkv * d;
  Tensor k_cache = filled({num_blocks, bs, hkv, d}, DType::f32, [](int64_t i) { return -1.0 - i; });
  Tensor v_cache = filled({num_blocks, bs, hkv, d}, DType::f32, [](int64_t i) { return -1000.0 - i; });
  const Tensor before_k = k_cache.clone(), before_v = v_cache.clone();
  const Tensor k = filled({4, hkv, d}, DType::f32, [](int64_t i) { return i; });
  const Tensor v = filled({4, hkv, d}, DType::f32, [](int64_t i) { return 100.0 + i; });
  const std::vector<int32_t> slots = {11, -1, 0, 5};
  ops::paged_kv_write(k_cache, v_cache, k, v, i32_tensor(slots));
  for (int64_t s = 0; s < num_blocks * bs; ++s) {
    const auto it = std::find(slots.begin(), slots.end(), s);
    const int64_t t = it == slots.end() ? -1 : it - slots.begin();
    for (int64_t e = 0; e < row; ++e) {
      const float kx = k_cache.data<float>()[s * row + e], vx = v_cache.data<float>()[s * row + e];
      EXPECT_EQ(kx, t < 0 ? before_k.data<float>()[s * row + e] : k.data<float>()[t * row + e]) << s << " " << e;
      EXPECT_EQ(vx, t < 0 ? before_v.data<float>()[s * row + e] : v.data<float>()[t * row + e]) << s << " " << e;
    }
  }
  Tensor none_k = Tensor::empty({0, hkv, d}, DType::f32), none_v = Tensor::empty({0, hkv, d}, DType::f32);
  ops::paged_kv_write(k_cache, v_cache, none_k, none_v, Tensor::empty({0}, DType::i32));  // no rows: nothing
}

TEST(PagedKvWrite, BadSlotsAndShapesAbortNamingTheEntry) {
  use_threadsafe_death_tests();
  Tensor k_cache = Tensor::zeros({2, 4, 1, 8}, DType::f32), v_cache = Tensor::zeros({2, 4, 1, 8}, DType::f32);
  const Tensor k = random_normal({3, 1, 8}, 1), v = random_normal({3, 1, 8}, 2);
  EXPECT_DEATH(ops::paged_kv_write(k_cache, v_cache, k, v, i32_tensor({0, 8, 1})),
               "ops::paged_kv_write: slot_mapping\\[1\\] = 8 is outside \\[-1, 8\\)");
  EXPECT_DEATH(ops::paged_kv_write(k_cache, v_cache, k, v, i32_tensor({-2, 0, 1})),
               "ops::paged_kv_write: slot_mapping\\[0\\] = -2");
  EXPECT_DEATH(ops::paged_kv_write(k_cache, v_cache, k, v, i32_tensor({0, 1})), "ops::paged_kv_write: slot_mapping");
  const Tensor k_wide = random_normal({3, 2, 8}, 3);
  EXPECT_DEATH(ops::paged_kv_write(k_cache, v_cache, k_wide, k_wide, i32_tensor({0, 1, 2})),
               "ops::paged_kv_write: k is .* \\(expected k \\[T, Hkv, D\\] with the cache's Hkv and D\\)");
  Tensor v_small = Tensor::zeros({1, 4, 1, 8}, DType::f32);
  EXPECT_DEATH(ops::paged_kv_write(k_cache, v_small, k, v, i32_tensor({0, 1, 2})), "ops::paged_kv_write: v_cache");
}

// qkv_split_paged_write against its definition: qkv_split_forward into temporaries, then paged_kv_write. Caches start
// random (so a skipped or misplaced row shows), slots include -1 and are scattered over blocks; theta 0 and > 0; the
// last case is large enough for the parallel path.
TEST(QkvSplitPagedWrite, EqualsSplitThenPagedKvWrite) {
  struct Case {
    int64_t tokens, heads_q, heads_kv, dim, num_blocks, block_size;
    float theta;
  };
  const Case cases[] = {{7, 6, 2, 8, 3, 4, 10000.f}, {5, 3, 3, 4, 2, 4, 0.f}, {1, 9, 3, 64, 4, 16, 100000.f},
                        {300, 9, 3, 64, 24, 16, 100000.f}};
  uint64_t seed = 500;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "T=" << c.tokens << " Hq=" << c.heads_q << " Hkv=" << c.heads_kv
                                      << " D=" << c.dim << " theta=" << c.theta);
    const int64_t num_slots = c.num_blocks * c.block_size;
    std::vector<int32_t> slots, pos;
    for (int64_t t = 0; t < c.tokens; ++t) {
      slots.push_back(t % 4 == 1 ? -1 : static_cast<int32_t>((t * 37 + 5) % num_slots));  // distinct: T < num_slots
      pos.push_back(static_cast<int32_t>((t * 53 + 11) % 5000));
    }
    const Shape cache_shape{c.num_blocks, c.block_size, c.heads_kv, c.dim};
    const Tensor qkv = random_normal({c.tokens, (c.heads_q + 2 * c.heads_kv) * c.dim}, seed++);
    const Tensor k_init = random_normal(cache_shape, seed++), v_init = random_normal(cache_shape, seed++);
    const Tensor positions = i32_tensor(pos), slot_mapping = i32_tensor(slots);

    Tensor q_ref = nan_tensor({c.tokens, c.heads_q, c.dim}), k = nan_tensor({c.tokens, c.heads_kv, c.dim});
    Tensor v = nan_tensor(k.shape()), k_ref = k_init.clone(), v_ref = v_init.clone();
    ops::qkv_split_forward(q_ref, k, v, qkv, positions, c.theta);
    ops::paged_kv_write(k_ref, v_ref, k, v, slot_mapping);

    Tensor q = nan_tensor(q_ref.shape()), k_cache = k_init.clone(), v_cache = v_init.clone();
    ops::qkv_split_paged_write(q, k_cache, v_cache, qkv, positions, slot_mapping, c.theta);
    EXPECT_TRUE(bitwise_equal(q, q_ref)) << "q";
    EXPECT_TRUE(bitwise_equal(k_cache, k_ref)) << "k_cache";
    EXPECT_TRUE(bitwise_equal(v_cache, v_ref)) << "v_cache";
  }
}

// Every row padding (-1): the caches keep their bytes, q is still written.
TEST(QkvSplitPagedWrite, SlotMinusOneLeavesTheCacheUntouched) {
  const int64_t t = 3, hq = 4, hkv = 2, d = 8;
  const Tensor qkv = random_normal({t, (hq + 2 * hkv) * d}, 7), positions = i32_tensor({0, 5, 9});
  const Tensor k_init = random_normal({2, 4, hkv, d}, 8), v_init = random_normal({2, 4, hkv, d}, 9);
  Tensor q = nan_tensor({t, hq, d}), k_cache = k_init.clone(), v_cache = v_init.clone();
  ops::qkv_split_paged_write(q, k_cache, v_cache, qkv, positions, i32_tensor({-1, -1, -1}), 10000.f);
  EXPECT_TRUE(bitwise_equal(k_cache, k_init));
  EXPECT_TRUE(bitwise_equal(v_cache, v_init));
  Tensor q_ref = nan_tensor(q.shape()), k = nan_tensor({t, hkv, d}), v = nan_tensor({t, hkv, d});
  ops::qkv_split_forward(q_ref, k, v, qkv, positions, 10000.f);
  EXPECT_TRUE(bitwise_equal(q, q_ref));
}

TEST(QkvSplitPagedWrite, BadSlotsAndShapesAbortNamingTheEntry) {
  use_threadsafe_death_tests();
  Tensor k_cache = Tensor::zeros({2, 4, 1, 8}, DType::f32), v_cache = Tensor::zeros({2, 4, 1, 8}, DType::f32);
  Tensor q = Tensor::zeros({3, 2, 8}, DType::f32);
  const Tensor qkv = random_normal({3, 32}, 1), positions = i32_tensor({0, 1, 2});
  EXPECT_DEATH(ops::qkv_split_paged_write(q, k_cache, v_cache, qkv, positions, i32_tensor({0, 8, 1}), 1e4f),
               "ops::qkv_split_paged_write: slot_mapping\\[1\\] = 8 is outside \\[-1, 8\\)");
  EXPECT_DEATH(ops::qkv_split_paged_write(q, k_cache, v_cache, qkv, positions, i32_tensor({-2, 0, 1}), 1e4f),
               "ops::qkv_split_paged_write: slot_mapping\\[0\\] = -2");
  EXPECT_DEATH(ops::qkv_split_paged_write(q, k_cache, v_cache, qkv, positions, i32_tensor({0, 1}), 1e4f),
               "ops::qkv_split_paged_write: slot_mapping");
  EXPECT_DEATH(ops::qkv_split_paged_write(q, k_cache, v_cache, random_normal({3, 40}, 2), positions,
                                          i32_tensor({0, 1, 2}), 1e4f),
               "ops::qkv_split_paged_write: qkv is .*expected shape \\[3, 32\\]");
  Tensor k_d4 = Tensor::zeros({2, 4, 1, 4}, DType::f32), v_d4 = Tensor::zeros({2, 4, 1, 4}, DType::f32);
  EXPECT_DEATH(ops::qkv_split_paged_write(q, k_d4, v_d4, qkv, positions, i32_tensor({0, 1, 2}), 1e4f),
               "ops::qkv_split_paged_write: q is .* \\(head dims must match\\)");
  EXPECT_DEATH(ops::qkv_split_paged_write(q, k_cache, v_cache, qkv, Tensor(), i32_tensor({0, 1, 2}), 1e4f),
               "ops::qkv_split_paged_write: positions");
  EXPECT_DEATH(ops::qkv_split_paged_write(q, k_cache, k_cache, qkv, positions, i32_tensor({0, 1, 2}), 1e4f),
               "ops::qkv_split_paged_write: k_cache .* overlaps v_cache");
}

TEST(PagedAttention, BadTablesAbortNamingTheEntry) {
  use_threadsafe_death_tests();
  const PagedCase c{"errors", {9, 5}, {2, 1}, 2, 1, 4, 4};
  const PagedInputs in = make_paged_inputs(c, 5);
  Tensor out = nan_tensor(in.q.shape());
  auto call = [&](const Tensor& tables, const Tensor& lens, const Tensor& cu, int max_q, int max_ctx) {
    ops::paged_attention(out, in.q, in.k_cache, in.v_cache, tables, lens, cu, max_q, max_ctx, in.scale);
  };
  const int64_t max_blocks = in.block_tables.dim(1);  // 4: 3 used by sequence 0, then -1
  Tensor bad_tables = in.block_tables.clone();
  bad_tables.data<int32_t>()[max_blocks + 1] = 99;  // sequence 1's second block (positions 4..7; 5 keys use it)
  EXPECT_DEATH(call(bad_tables, in.context_lens, in.cu_q, 2, 9),
               "ops::paged_attention: block_tables\\[1, 1\\] = 99 is outside \\[0, 8\\)");
  bad_tables = in.block_tables.clone();
  bad_tables.data<int32_t>()[0] = -1;
  EXPECT_DEATH(call(bad_tables, in.context_lens, in.cu_q, 2, 9), "block_tables\\[0, 0\\] = -1");
  EXPECT_DEATH(call(in.block_tables, i32_tensor({9, 17}), in.cu_q, 2, 20),
               "ops::paged_attention: context_lens\\[1\\] = 17 exceeds the block table's 4 blocks x 4 = 16 positions");
  EXPECT_DEATH(call(in.block_tables, in.context_lens, in.cu_q, 2, 8),
               "ops::paged_attention: context_lens\\[0\\] = 9 > max_context_len 8");
  EXPECT_DEATH(call(in.block_tables, i32_tensor({1, 5}), in.cu_q, 2, 9),
               "ops::paged_attention: context_lens\\[0\\] = 1 is less than the sequence's 2 queries");
  EXPECT_DEATH(call(in.block_tables, in.context_lens, in.cu_q, 1, 9),
               "ops::paged_attention: sequence 0 has length 2 > max_seqlen 1 \\(cu_seqlens_q\\)");
  EXPECT_DEATH(call(in.block_tables, in.context_lens, i32_tensor({0, 2, 2}), 2, 9),
               "ops::paged_attention: cu_seqlens_q\\[2\\] = 2 but the tensor has 3 rows");
  EXPECT_DEATH(call(in.block_tables.view({4, 2}), in.context_lens, in.cu_q, 2, 9),
               "ops::paged_attention: block_tables is .*, expected 2 rows");
  EXPECT_DEATH(call(in.block_tables, i32_tensor({9}), in.cu_q, 2, 9), "ops::paged_attention: context_lens");
  const Tensor q_bad = random_normal({3, 3, 4}, 1);  // 3 q heads over 1 kv head is fine; 3 over 2 is not
  Tensor k2 = Tensor::zeros({6, 4, 2, 4}, DType::f32);
  Tensor out3 = nan_tensor(q_bad.shape());
  EXPECT_DEATH(ops::paged_attention(out3, q_bad, k2, k2, in.block_tables, in.context_lens, in.cu_q, 2, 9, 1.f),
               "q heads must be a multiple of kv heads");
}

}  // namespace
}  // namespace vlm::testing
