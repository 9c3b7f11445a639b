// qkv_split_paged_write on CUDA (the decode step's QKV split + RoPE with its k/v heads written straight into paged
// cache slots, one kernel), f32 and bf16, on both kernel paths (vectors: D = 16, 64, 128 with aligned tensors; scalar:
// D = 6 and 12, or a qkv starting 3 elements into its buffer), T = 1 to 300, rows with slot -1, head groups that mix
// q and k/v heads (9 + 2 x 3 heads over threads of 4) and ones that split exactly (4 + 2 x 2):
//   * against the CPU reference (the CPU op on the dtype-rounded inputs): q into a NaN-filled guarded output, the
//     caches guarded with every slot the op writes NaN first (every element written, nothing outside, the other
//     slots unchanged); v exact, q and k within the rotation's tolerance;
//   * against the GPU composition qkv_split_forward + paged_kv_write on the same device tensors, bit for bit.
// And bad slots: recorded, named by check_index_errors, their rows' k/v skipped while q is still written.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

struct Case {
  int64_t tokens, heads_q, heads_kv, dim, num_blocks, block_size;
  float theta;
};
const Case kCases[] = {
    {1, 9, 3, 64, 8, 16, 100000.f},    // SmolLM2-135M decode at batch 1
    {37, 9, 3, 64, 8, 16, 100000.f},   // a decode batch / prefill chunk with padding rows
    {300, 8, 2, 128, 24, 16, 10000.f}, // D = 128, q-only and k/v-only head groups
    {17, 4, 2, 64, 4, 8, 10000.f},     // heads_q a multiple of the heads per thread
    {17, 4, 4, 16, 3, 8, 0.f},         // one bf16 vector per half, no rotation
    {17, 3, 1, 6, 4, 8, 10000.f},      // scalar path (D / 2 = 3)
    {5, 2, 1, 12, 2, 4, 10000.f},      // scalar for both dtypes
};

// The rotations use the same f32 angles on both devices; CUDA's cosf/sinf and FMA contraction differ from the CPU's
// by a few ulp of |x| (as test_cuda_packed.cpp's split).
constexpr Tolerance kRotation{1e-5, 4e-6};

std::vector<int32_t> slots_of(const Case& c) {
  const int64_t num_slots = c.num_blocks * c.block_size;
  std::vector<int32_t> slots;
  for (int64_t t = 0; t < c.tokens; ++t)  // distinct (37 and num_slots coprime, T <= num_slots), every 5th padding
    slots.push_back(t % 5 == 2 ? -1 : static_cast<int32_t>((t * 37 + 5) % num_slots));
  return slots;
}

std::vector<int32_t> positions_of(int64_t tokens) {
  std::vector<int32_t> pos;
  for (int64_t t = 0; t < tokens; ++t) pos.push_back(static_cast<int32_t>((t * 53 + 7) % 12000));
  return pos;
}

// A random cache with the rows `slots` will write set to NaN: the op must overwrite every element of them.
Tensor cache_init(const Case& c, const std::vector<int32_t>& slots, uint64_t seed) {
  Tensor cache = random_normal({c.num_blocks, c.block_size, c.heads_kv, c.dim}, seed);
  const int64_t row = c.heads_kv * c.dim;
  for (int32_t s : slots)
    if (s >= 0) std::fill_n(cache.data<float>() + s * row, row, std::nanf(""));
  return cache;
}

TEST(CudaQkvSplitPagedWrite, MatchesCpuAndTheGpuComposition) {
  VLM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 4000;
  for (DType dt : compute_dtypes())
    for (const Case& c : kCases)
      for (int64_t offset : {0, 3}) {  // offset 3: a misaligned qkv takes the scalar path
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " T=" << c.tokens << " Hq=" << c.heads_q
                                          << " Hkv=" << c.heads_kv << " D=" << c.dim << " theta=" << c.theta
                                          << " offset=" << offset);
        const Shape q_shape{c.tokens, c.heads_q, c.dim}, kv_shape{c.tokens, c.heads_kv, c.dim};
        const std::vector<int32_t> slots = slots_of(c), pos = positions_of(c.tokens);
        const Tensor qkv = random_normal({c.tokens, (c.heads_q + 2 * c.heads_kv) * c.dim}, seed++);
        const Tensor k_init = cache_init(c, slots, seed++), v_init = cache_init(c, slots, seed++);
        const Tolerance tol = output_tolerance(dt, kRotation);

        Tensor q_ref = Tensor::empty(q_shape, DType::f32), k_ref = rounded(k_init, dt), v_ref = rounded(v_init, dt);
        ops::qkv_split_paged_write(q_ref, k_ref, v_ref, rounded(qkv, dt), i32_tensor(pos), i32_tensor(slots),
                                   c.theta);

        const Tensor qkv_gpu = to_gpu_at_offset(qkv, dt, offset), positions = gpu_i32(pos);
        const Tensor slot_mapping = gpu_i32(slots);
        Guarded q(q_shape, dt), k_cache(k_init, dt), v_cache(v_init, dt);
        ops::qkv_split_paged_write(q.view(), k_cache.view(), v_cache.view(), qkv_gpu, positions, slot_mapping,
                                   c.theta);
        EXPECT_TRUE(matches(q, q_ref, tol)) << "q";
        EXPECT_TRUE(matches(k_cache, k_ref, tol)) << "k_cache";
        EXPECT_TRUE(matches(v_cache, v_ref, {0, 0})) << "v_cache";  // moved, never converted: exact
        EXPECT_TRUE(bitwise_equal(to_cpu_f32(v_cache.view()), v_ref)) << "v_cache";

        Tensor q2 = Tensor::empty(q_shape, dt, gpu()), k2 = Tensor::empty(kv_shape, dt, gpu());
        Tensor v2 = Tensor::empty(kv_shape, dt, gpu());
        Tensor k_cache2 = to_gpu(k_init, dt), v_cache2 = to_gpu(v_init, dt);
        ops::qkv_split_forward(q2, k2, v2, qkv_gpu, positions, c.theta);
        ops::paged_kv_write(k_cache2, v_cache2, k2, v2, slot_mapping);
        EXPECT_TRUE(bitwise_equal(to_cpu_f32(q.view()), to_cpu_f32(q2))) << "q vs the composition";
        EXPECT_TRUE(bitwise_equal(to_cpu_f32(k_cache.view()), to_cpu_f32(k_cache2))) << "k_cache vs the composition";
        EXPECT_TRUE(bitwise_equal(to_cpu_f32(v_cache.view()), to_cpu_f32(v_cache2))) << "v_cache vs the composition";
      }
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

// A bad slot is recorded and named; its row's k/v are skipped (the cache keeps its bytes there) while q and the
// good rows are written, on the vector path (D = 64) and the scalar one (D = 6).
TEST(CudaQkvSplitPagedWrite, BadSlotsAreRecordedAndNamed) {
  VLM_SKIP_WITHOUT_CUDA();
  ASSERT_TRUE(ops::check_index_errors(gpu()).ok());
  for (int64_t dim : {64, 6}) {
    SCOPED_TRACE(::testing::Message() << "D=" << dim);
    const Case c{3, 9, 3, dim, 2, 16, 10000.f};
    const std::vector<int32_t> pos = positions_of(c.tokens);
    const Tensor qkv = random_normal({c.tokens, (c.heads_q + 2 * c.heads_kv) * dim}, 11);
    const Tensor k_init = random_normal({c.num_blocks, c.block_size, c.heads_kv, dim}, 12);
    const Tensor v_init = random_normal(k_init.shape(), 13);
    for (int32_t bad : {1000, -5}) {
      SCOPED_TRACE(::testing::Message() << "bad slot " << bad);
      const std::vector<int32_t> slots = {3, bad, 7};
      Tensor q = Tensor::empty({c.tokens, c.heads_q, dim}, DType::f32, gpu());
      Tensor k_cache = to_gpu(k_init, DType::f32), v_cache = to_gpu(v_init, DType::f32);
      ops::qkv_split_paged_write(q, k_cache, v_cache, to_gpu(qkv, DType::f32), gpu_i32(pos), gpu_i32(slots), c.theta);
      const Status s = ops::check_index_errors(gpu());
      ASSERT_FALSE(s.ok());
      EXPECT_NE(s.message().find("qkv_split_paged_write (slot_mapping): entry 1 = " + std::to_string(bad) +
                                 " is outside [-1, 32)"),
                std::string::npos)
          << s.message();
      // The CPU reference with the bad row as padding gives what the GPU must have written.
      Tensor q_ref = Tensor::empty(q.shape(), DType::f32), k_ref = k_init.clone(), v_ref = v_init.clone();
      ops::qkv_split_paged_write(q_ref, k_ref, v_ref, qkv, i32_tensor(pos), i32_tensor({3, -1, 7}), c.theta);
      EXPECT_TRUE(all_close(to_cpu_f32(q), q_ref, kRotation.rtol, kRotation.atol)) << "q";
      EXPECT_TRUE(all_close(to_cpu_f32(k_cache), k_ref, kRotation.rtol, kRotation.atol)) << "k_cache";
      EXPECT_TRUE(bitwise_equal(to_cpu_f32(v_cache), v_ref)) << "v_cache";
    }
  }
  EXPECT_TRUE(ops::check_index_errors(gpu()).ok());
}

}  // namespace
}  // namespace vlm::testing
