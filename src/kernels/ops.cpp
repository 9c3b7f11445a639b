// What ops.h declares besides the op families of ops/: supports(), the device-level switches and streams
// (GEMM autotuning, the compute stream, the weight-gradient side stream, the attention backward and kernels), CUDA
// graphs and the index-error check. The ops themselves are in ops/<family>.cpp.
#include "kernels/ops.h"

#include <algorithm>

#include "core/cuda_allocator.h"
#include "core/env.h"
#ifdef VLM_HAVE_CUDA
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_ops.h"
#endif

namespace vlm::ops {

namespace {

// Every op in ops.h, by name, for supports().
constexpr const char* kOps[] = {"cast",
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
                                "check_cu_seqlens",
                                "paged_kv_write",
                                "qkv_split_paged_write",
                                "paged_attention",
                                "cross_entropy_forward",
                                "cross_entropy_backward",
                                "cross_entropy_forward_backward",
                                "lm_head_cross_entropy",
                                "argmax_rows",
                                "gumbel_argmax_rows",
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
                                "sum_of_squares",
                                "sum",
                                "zero_multi",
                                "quantize_fp8_blocks",
                                "dequantize_fp8_blocks",
                                "rmsnorm_linear_forward",
                                "rmsnorm_linear_swiglu_forward",
                                "rmsnorm_qkv_paged_write"};

}  // namespace

bool supports(const std::string& op, Device device) {
#ifndef VLM_HAVE_CUDA
  if (device.is_cuda()) return false;
#endif
  return std::any_of(std::begin(kOps), std::end(kOps), [&](const char* name) { return op == name; });
}

void set_gemm_autotune(bool on) {
#ifdef VLM_HAVE_CUDA
  cuda::set_gemm_autotune(on);
#else
  (void)on;
#endif
}

WeightGradOverlap::WeightGradOverlap(Device device) : device_(device) {
#ifdef VLM_HAVE_CUDA
  if (device_.is_cuda()) cuda::weight_grad_overlap_begin(device_);
#endif
}

WeightGradOverlap::~WeightGradOverlap() {
#ifdef VLM_HAVE_CUDA
  if (device_.is_cuda()) cuda::weight_grad_overlap_end(device_);
#endif
}

void set_attention_deterministic(bool on) {
#ifdef VLM_HAVE_CUDA
  cuda::set_attention_deterministic(on);
#else
  (void)on;
#endif
}

void set_attention_flash(bool on) {
#ifdef VLM_HAVE_CUDA
  cuda::set_attention_flash(on);
#else
  (void)on;
#endif
}

bool attention_flash() {
#ifdef VLM_HAVE_CUDA
  return cuda::attention_flash();
#else
  return true;
#endif
}

void set_deterministic(bool on) {
  set_attention_deterministic(on);
  set_gemm_autotune(!on);
}

bool attention_deterministic() {
#ifdef VLM_HAVE_CUDA
  return cuda::attention_deterministic();
#else
  return true;  // the CPU kernels always are
#endif
}

// ---- graphs ------------------------------------------------------------------------------------------------

GraphPool::GraphPool(Device device) : device_(device) {
  VLM_CHECK(OpGraph::supported(device), "ops::GraphPool: CUDA graphs need a CUDA device, not ", device.to_string());
}

GraphPool::~GraphPool() { release_cuda_pool(device_.index, key()); }

bool OpGraph::supported(Device device) {
#ifdef VLM_HAVE_CUDA
  return device.is_cuda();
#else
  (void)device;
  return false;
#endif
}

OpGraph::OpGraph(GraphPool& pool, const std::function<void()>& ops) : device_(pool.device()) {
#ifdef VLM_HAVE_CUDA
  exec_ = cuda::graph_capture(device_, pool.key(), ops, nodes_);
#else
  (void)ops;
  VLM_FAIL("ops::OpGraph: CUDA graphs need a CUDA build");
#endif
}

OpGraph::~OpGraph() {
#ifdef VLM_HAVE_CUDA
  if (exec_) cuda::graph_destroy(exec_);
#endif
}

void OpGraph::replay() const {
#ifdef VLM_HAVE_CUDA
  cuda::graph_replay(exec_, device_);
#endif
}

// ---- errors ------------------------------------------------------------------------------------------------

Status check_index_errors(Device device) {
  if (device.is_cpu()) return Status();
#ifdef VLM_HAVE_CUDA
  return cuda::take_index_error(device);
#else
  return unsupported(str("ops::check_index_errors: ", device.to_string(), " in a build without CUDA"));
#endif
}

}  // namespace vlm::ops
