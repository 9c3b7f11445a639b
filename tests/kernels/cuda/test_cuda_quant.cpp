// The quant family on CUDA against the CPU reference: the same codes and scales byte for byte (quantize of f32 and
// of bf16 inputs), and the same dequantized values (f32 bitwise; bf16: the f32 value rounded once), on odd sizes;
// every element written (outputs filled with two different patterns first must come out the same).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cuda_test_util.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"
#include "testing/test_util.h"

namespace vlm::testing {
namespace {

Tensor filled_u8(int64_t n, uint8_t byte) {
  Tensor t = Tensor::empty({n}, DType::u8);
  std::memset(t.raw_data(), byte, static_cast<size_t>(n));
  return t.to(gpu());
}

TEST(CudaQuant, Fp8BlocksMatchTheCpuByteForByte) {
  VLM_SKIP_WITHOUT_CUDA();
  for (DType dtype : compute_dtypes()) {
    for (int64_t n : {1, 31, 128, 129, 1000, 65537}) {
      SCOPED_TRACE(str(dtype_name(dtype), " n ", n));
      Tensor x = random_normal({n}, static_cast<uint64_t>(n) + 3, 2.f);
      float* p = x.data<float>();
      for (int64_t i = 0; i < n; ++i) p[i] *= std::ldexp(1.f, static_cast<int>((i / 128) % 7) * 4 - 12);
      const Tensor x_cpu = rounded(x, dtype);  // what the GPU reads, as f32 (bf16 widens exactly)
      const int64_t blocks = ops::fp8_block_count(n);
      Tensor q_ref = Tensor::empty({n}, DType::u8), s_ref = Tensor::empty({blocks}, DType::f32);
      ops::quantize_fp8_blocks(q_ref, s_ref, x_cpu);
      Tensor back_ref = Tensor::empty({n}, DType::f32);
      ops::dequantize_fp8_blocks(back_ref, q_ref, s_ref);
      const Tensor x_gpu = to_gpu(x, dtype);
      for (uint8_t fill : {uint8_t{0x00}, uint8_t{0xFF}}) {
        Tensor q = filled_u8(n, fill), s = Tensor::full({blocks}, NAN).to(gpu());
        ops::quantize_fp8_blocks(q, s, x_gpu);
        EXPECT_TRUE(bitwise_equal(q.to(Device::cpu()), q_ref));
        EXPECT_TRUE(bitwise_equal(s.to(Device::cpu()), s_ref));
      }
      Guarded back({n}, dtype);
      ops::dequantize_fp8_blocks(back.view(), q_ref.to(gpu()), s_ref.to(gpu()));
      EXPECT_TRUE(bitwise_equal(to_cpu_f32(back.view()), rounded(back_ref, dtype)));
      EXPECT_TRUE(back.guards_intact());
    }
  }
}

}  // namespace
}  // namespace vlm::testing
