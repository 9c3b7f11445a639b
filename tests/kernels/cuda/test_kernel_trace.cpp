// The CUPTI kernel trace (kernels/cuda/kernel_trace.h). On the host: the summary's interval arithmetic on hand-made
// records (overlapping streams, gaps, nesting, unsorted and empty input; exact values) and the kernel-name
// shortening on real mangled names. On a device: a traced run of a known kernel and memset; there CUPTI must load
// (the test fails with the loader's message rather than skip: the benchmark's kernel trace depends on it).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/cuda/kernel_trace.h"
#include "kernels/ops.h"

namespace vlm::testing {
namespace {

using ops::trace::KernelTime;
using ops::trace::RecordKind;
using ops::trace::short_kernel_name;
using ops::trace::summarize;
using ops::trace::TraceRecord;
using ops::trace::TraceSummary;

// Timestamps in microseconds (the records take nanoseconds).
TraceRecord rec(const char* name, uint64_t start_us, uint64_t end_us, uint32_t stream = 7,
                RecordKind kind = RecordKind::kernel) {
  return {kind, name, start_us * 1000, end_us * 1000, stream};
}

const KernelTime* find(const TraceSummary& s, const std::string& name) {
  for (const KernelTime& k : s.by_kernel)
    if (k.name == name) return &k;
  return nullptr;
}

TEST(KernelTraceSummary, EmptyInputIsAllZero) {
  const TraceSummary s = summarize({});
  EXPECT_EQ(s.window_ms, 0);
  EXPECT_EQ(s.busy_ms, 0);
  EXPECT_EQ(s.idle_ms, 0);
  EXPECT_EQ(s.concurrent_ms, 0);
  EXPECT_EQ(s.kernels + s.memcpys + s.memsets + s.invalid, 0);
  EXPECT_TRUE(s.by_kernel.empty());
}

TEST(KernelTraceSummary, GapsOnOneStreamAreIdle) {
  // [100, 150) gap 50 [200, 230) gap 70 [300, 400): window 300, busy 180, idle 120, nothing concurrent.
  const TraceSummary s = summarize({rec("a", 100, 150), rec("b", 200, 230), rec("a", 300, 400)});
  EXPECT_DOUBLE_EQ(s.window_ms, 0.300);
  EXPECT_DOUBLE_EQ(s.busy_ms, 0.180);
  EXPECT_DOUBLE_EQ(s.idle_ms, 0.120);
  EXPECT_DOUBLE_EQ(s.concurrent_ms, 0);
  EXPECT_EQ(s.kernels, 3);
  ASSERT_EQ(s.by_kernel.size(), 2u);
  EXPECT_EQ(s.by_kernel[0].name, "a");  // 150 us before b's 30
  EXPECT_EQ(s.by_kernel[0].calls, 2);
  EXPECT_DOUBLE_EQ(s.by_kernel[0].ms, 0.150);
  EXPECT_DOUBLE_EQ(s.by_kernel[0].mean_us, 75);
  EXPECT_DOUBLE_EQ(s.by_kernel[0].max_us, 100);
  EXPECT_EQ(s.by_kernel[1].name, "b");
  EXPECT_DOUBLE_EQ(s.by_kernel[1].ms, 0.030);
}

TEST(KernelTraceSummary, OverlappingStreamsCountOnceAsBusy) {
  // Stream 1: [10, 110); stream 2: [60, 160) and [200, 220) on a memcpy; memset [215, 240) on stream 1.
  // Union: [10, 160) + [200, 240) = 150 + 40 = 190; window 230; summed 100 + 100 + 20 + 25 = 245.
  const TraceSummary s = summarize({rec("gemm", 10, 110, 1), rec("norm", 60, 160, 2),
                                    rec("[memcpy HtoD]", 200, 220, 2, RecordKind::memcpy),
                                    rec("[memset]", 215, 240, 1, RecordKind::memset)});
  EXPECT_DOUBLE_EQ(s.window_ms, 0.230);
  EXPECT_DOUBLE_EQ(s.busy_ms, 0.190);
  EXPECT_DOUBLE_EQ(s.idle_ms, 0.040);
  EXPECT_DOUBLE_EQ(s.concurrent_ms, 0.055);  // 50 (gemm/norm) + 5 (memcpy/memset)
  EXPECT_EQ(s.kernels, 2);
  EXPECT_EQ(s.memcpys, 1);
  EXPECT_EQ(s.memsets, 1);
  ASSERT_NE(find(s, "[memcpy HtoD]"), nullptr);
  EXPECT_EQ(find(s, "[memcpy HtoD]")->calls, 1);
  ASSERT_NE(find(s, "[memset]"), nullptr);
  EXPECT_DOUBLE_EQ(find(s, "[memset]")->max_us, 25);
}

TEST(KernelTraceSummary, NestedIntervalsAndUnsortedInput) {
  // An outer kernel [100, 500) on stream 1 holds [150, 200) and [300, 450) of stream 2 and [320, 330) of stream 3;
  // then [600, 700) after a gap; given in reverse order. Union 400 + 100 = 500, window 600, summed 710.
  std::vector<TraceRecord> records = {rec("late", 600, 700, 1), rec("tiny", 320, 330, 3), rec("inner", 300, 450, 2),
                                      rec("inner", 150, 200, 2), rec("outer", 100, 500, 1)};
  const TraceSummary s = summarize(records);
  EXPECT_DOUBLE_EQ(s.window_ms, 0.600);
  EXPECT_DOUBLE_EQ(s.busy_ms, 0.500);
  EXPECT_DOUBLE_EQ(s.idle_ms, 0.100);
  EXPECT_DOUBLE_EQ(s.concurrent_ms, 0.210);
  ASSERT_EQ(s.by_kernel.size(), 4u);
  EXPECT_EQ(s.by_kernel[0].name, "outer");
  EXPECT_EQ(s.by_kernel[1].name, "inner");
  EXPECT_EQ(s.by_kernel[1].calls, 2);
  EXPECT_DOUBLE_EQ(s.by_kernel[1].max_us, 150);
  EXPECT_EQ(s.by_kernel[2].name, "late");
  EXPECT_EQ(s.by_kernel[3].name, "tiny");
}

TEST(KernelTraceSummary, TouchingZeroLengthAndInvalidRecords) {
  // Back-to-back intervals leave no idle time; a zero-length record is a call of no duration; a record without a
  // start timestamp or ending before it starts is left out (invalid) and does not stretch the window.
  TraceRecord no_start = rec("broken", 0, 50);
  const TraceSummary s = summarize({rec("a", 100, 200), rec("b", 200, 300), rec("empty", 300, 300), no_start,
                                    rec("backwards", 900, 800)});
  EXPECT_EQ(s.invalid, 2);
  EXPECT_EQ(s.kernels, 3);
  EXPECT_DOUBLE_EQ(s.window_ms, 0.200);
  EXPECT_DOUBLE_EQ(s.busy_ms, 0.200);
  EXPECT_DOUBLE_EQ(s.idle_ms, 0);
  EXPECT_DOUBLE_EQ(s.concurrent_ms, 0);
  ASSERT_NE(find(s, "empty"), nullptr);
  EXPECT_EQ(find(s, "empty")->calls, 1);
  EXPECT_EQ(find(s, "empty")->ms, 0);
  EXPECT_EQ(find(s, "broken"), nullptr);
}

TEST(KernelTraceSummary, KernelsAreSummedUnderTheirShortNames) {
  // Two launches of one mangled kernel and one of another instantiation: two rows, named short.
  const char* bf16 = "_ZN3vlm5flash16flash_fwd_kernelILi128E13__nv_bfloat16Lb1EEEvNS0_14FlashFwdParamsE";
  const char* half = "_ZN3vlm5flash16flash_fwd_kernelILi128E6__halfLb1EEEvNS0_14FlashFwdParamsE";
  const TraceSummary s = summarize({rec(bf16, 10, 20), rec(half, 30, 60), rec(bf16, 70, 80)});
  ASSERT_EQ(s.by_kernel.size(), 2u);
  EXPECT_EQ(s.by_kernel[0].name, "flash_fwd_kernel<128, __half, true>");
  EXPECT_EQ(s.by_kernel[1].name, "flash_fwd_kernel<128, __nv_bfloat16, true>");
  EXPECT_EQ(s.by_kernel[1].calls, 2);
}

TEST(KernelTraceNames, OurKernelsLoseSignatureAndNamespaces) {
  // Names as nvcc mangles them (from libvlm_kernels.a and libvlm_flash.a), anonymous namespaces included.
  EXPECT_EQ(short_kernel_name("_ZN3vlm3ops4cuda47_GLOBAL__N__2094e0d7_14_elementwise_cu_f949ef6610map_kernelIffLi2ELi1E"
                              "NS2_12GeluBackwardEEEvNS2_7MapArgsIT_T0_XT1_EXT2_EEET3_b"),
            "map_kernel<float, float, 2, 1, GeluBackward>");
  EXPECT_EQ(short_kernel_name("_ZN3vlm3ops4cuda22column_partials_kernelILi1ENS1_41_GLOBAL__N__ecd156fb_9_reduce_cu_94"
                              "9358d511ColumnValueI13__nv_bfloat16EEEEvPflllT0_"),
            "column_partials_kernel<1, ColumnValue<__nv_bfloat16>>");
  EXPECT_EQ(short_kernel_name("_ZN3vlm3ops4cuda39_GLOBAL__N__d57c0752_7_norm_cu_be7b49c425norm_backward_warp_kernelI13"
                              "__nv_bfloat16Li8ELb1ELb1EEEvPT_PfPKS5_S9_S9_S9_PKfSB_lll"),
            "norm_backward_warp_kernel<__nv_bfloat16, 8, true, true>");
  EXPECT_EQ(short_kernel_name("_ZN3vlm5flash52_GLOBAL__N__3baeb913_19_flash_hopper_fwd_cu_14bed0c021flash_fwd_sm90_"
                              "kernelILi128ELb1ELb0ELi2EEEv14CUtensorMap_stS3_S3_S3_S3_NS0_14FlashFwdParamsEiPii"),
            "flash_fwd_sm90_kernel<128, true, false, 2>");
  EXPECT_EQ(short_kernel_name("_ZN3vlm3ops4cuda20column_finish_kernelILi2EEEvNS1_13ColumnOutputsIXT_EEEPKfll"),
            "column_finish_kernel<2>");
  EXPECT_EQ(short_kernel_name("_ZN3cub17CUB_300001_SM_9006detail11EmptyKernelIvEEvv"), "EmptyKernel<void>");
  // A member of a class template used as a template argument, and a function-pointer parameter.
  EXPECT_EQ(short_kernel_name("_ZN3vlm4kernINS_3BoxIfE5InnerEEEvT_PFviE"), "kern<Inner>");
}

TEST(KernelTraceNames, LongNamesKeepTheirFirstTemplateArguments) {
  // A CUTLASS-style kernel (mangled by g++ from nested templates): 146 characters short, cut to 90.
  const std::string name = short_kernel_name(
      "_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalINS1_9GemmShapeILi128ELi256ELi64EEENS4_ILi64ELi64ELi64"
      "EEENS_8epilogue6thread17LinearCombinationIfLi8EEENS_11threadblock30GemmIdentityThreadblockSwizzleILi8EEELb1EEEE"
      "EvNT_6ParamsE");
  EXPECT_EQ(name, "device_kernel<GemmUniversal<GemmShape<128, 256, 64>, GemmShape<64, 64, 64>, LinearCombi...");
  EXPECT_EQ(name.size(), ops::trace::kMaxKernelNameChars);
}

TEST(KernelTraceNames, CNamesAreOnlyCapped) {
  const char* nvjet = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT";  // cuBLASLt's Hopper GEMMs
  EXPECT_EQ(short_kernel_name(nvjet), nvjet);
  const std::string cublas = short_kernel_name(
      "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__"
      "5x_cublas");
  EXPECT_EQ(cublas, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_...");
  EXPECT_EQ(short_kernel_name("_Z"), "_Z");  // not a valid mangling: kept as is
  EXPECT_EQ(short_kernel_name("b"), "b");    // a type's mangling ("bool"), but kernels are functions
  EXPECT_EQ(short_kernel_name("a"), "a");
  EXPECT_EQ(short_kernel_name(nullptr), "(unknown)");
}

TEST(KernelTraceApi, EndWithoutBeginIsAnError) {
  const Expected<TraceSummary> s = ops::trace::trace_end();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("without trace_begin"), std::string::npos) << s.status().to_string();
}

TEST(KernelTraceApi, BeginWithoutADeviceFailsAndLeavesNoTraceRunning) {
  // Not a skip with a device (dev/gpu/gpu_ops.sh fails a GPU run that skips tests): the GPU test covers that case.
  if (cuda_available()) return;
  // CUPTI cannot be loaded here, or it loads and the device synchronization fails: an error either way.
  const Status begun = ops::trace::trace_begin();
  EXPECT_FALSE(begun.ok());
  EXPECT_NE(begun.message().find("kernel trace: "), std::string::npos) << begun.to_string();
  EXPECT_FALSE(ops::trace::trace_end().ok());
}

TEST(KernelTraceApi, LibraryCandidatesPutTheEnvironmentFirst) {
  {
    const ScopedEnv lib("VLM_CUPTI_LIB", "/opt/cupti/libcupti.so.13");
    EXPECT_EQ(ops::trace::cupti_library_candidates(),
              (std::vector<std::string>{"/opt/cupti/libcupti.so.13", "libcupti.so.13", "libcupti.so"}));
  }
  const ScopedEnv empty("VLM_CUPTI_LIB", "");
  EXPECT_EQ(ops::trace::cupti_library_candidates(), (std::vector<std::string>{"libcupti.so.13", "libcupti.so"}));
}

// N launches of ops::scale (map_kernel<..., Scale>) and one memset, traced twice: each trace holds its own work.
TEST(KernelTraceGpu, CountsKernelsAndMemsetsOfATracedRun) {
  VLM_SKIP_WITHOUT_CUDA();
  Tensor x = to_gpu(random_normal({1 << 20}, 1), DType::f32);
  ops::scale(x, 1.f);  // loads the module before the trace
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (const int calls : {7, 3}) {
    SCOPED_TRACE(::testing::Message() << calls << " launches");
    const Status begun = ops::trace::trace_begin();
    ASSERT_TRUE(begun.ok()) << begun.to_string();
    for (int i = 0; i < calls; ++i) ops::scale(x, 0.5f);
    ASSERT_EQ(cudaMemsetAsync(x.data<float>(), 0, static_cast<size_t>(x.numel()) * sizeof(float), nullptr),
              cudaSuccess);
    const Expected<TraceSummary> traced = ops::trace::trace_end();
    ASSERT_TRUE(traced.ok()) << traced.status().to_string();
    const TraceSummary& s = *traced;
    EXPECT_EQ(s.kernels, calls);
    EXPECT_EQ(s.memsets, 1);
    EXPECT_EQ(s.memcpys, 0);
    EXPECT_EQ(s.dropped, 0);
    EXPECT_EQ(s.invalid, 0);
    const KernelTime* scale = nullptr;
    for (const KernelTime& k : s.by_kernel) {
      if (k.name.find("Scale") != std::string::npos) scale = &k;
      EXPECT_GT(k.ms, 0) << k.name;
      EXPECT_GT(k.mean_us, 0) << k.name;
      EXPECT_GE(k.max_us, k.mean_us) << k.name;
    }
    ASSERT_NE(scale, nullptr) << "no kernel named like Scale; the largest: "
                              << (s.by_kernel.empty() ? "(none)" : s.by_kernel[0].name);
    EXPECT_NE(scale->name.find("map_kernel"), std::string::npos) << scale->name;
    EXPECT_EQ(scale->calls, calls);
    ASSERT_NE(find(s, "[memset]"), nullptr);
    EXPECT_EQ(find(s, "[memset]")->calls, 1);
    EXPECT_GT(s.busy_ms, 0);
    EXPECT_LE(s.busy_ms, s.window_ms);
    EXPECT_GE(s.idle_ms, 0);
    EXPECT_GE(s.concurrent_ms, 0);
  }
}

}  // namespace
}  // namespace vlm::testing
