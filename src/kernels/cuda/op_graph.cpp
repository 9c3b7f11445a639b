// ops::OpGraph on CUDA: stream capture on a dedicated non-blocking stream, allocations redirected to the graph's
// private pool, instantiation and replay on the current stream.
#include <cuda_runtime.h>

#include <functional>

#include "core/cuda_allocator.h"
#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_ops.h"

namespace vlm::ops::cuda {

void* graph_capture(Device device, const void* pool, const std::function<void()>& ops, size_t& nodes) {
  DeviceGuard guard(device);
  const StreamHandle previous = current_stream(device);
  auto stream = static_cast<cudaStream_t>(capture_stream(device.index));
  // The capture runs nothing: a replay is ordered with other work by the stream it is launched on.
  cudaGraph_t graph = nullptr;
  {
    const CudaPoolScope pool_scope(device.index, pool);
    set_current_stream(device.index, stream);
    // Relaxed: cudaMalloc (the pool growing) is allowed while capturing.
    VLM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    try {
      ops();
    } catch (...) {
      cudaGraph_t partial = nullptr;
      (void)cudaStreamEndCapture(stream, &partial);
      if (partial) (void)cudaGraphDestroy(partial);
      set_current_stream(device.index, previous);
      throw;
    }
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    set_current_stream(device.index, previous);
    VLM_CHECK(end == cudaSuccess && graph != nullptr, "op graph: the capture failed (", cudaGetErrorString(end),
              "): an op synchronized, copied through the host or used another stream while capturing");
  }
  VLM_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  VLM_CHECK(inst == cudaSuccess, "op graph: instantiating a graph of ", nodes, " nodes failed: ",
            cudaGetErrorString(inst));
  return exec;
}

void graph_replay(void* exec, Device device) {
  DeviceGuard guard(device);
  auto stream = static_cast<cudaStream_t>(current_stream(device));
  VLM_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), stream));
}

void graph_destroy(void* exec) { (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec)); }

}  // namespace vlm::ops::cuda
