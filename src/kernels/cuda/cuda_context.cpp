// Current streams, the device guard, scratch tensors and the index-error record (see cuda_context.h).
#include "kernels/cuda/cuda_context.h"

#include <cuda_runtime.h>

#include <array>
#include <mutex>

#include "core/cuda_check.h"

namespace vlm::ops::cuda {

namespace {

constexpr int kMaxDevices = 64;

void check_device_index(int device) {
  VLM_CHECK(device >= 0 && device < kMaxDevices, "cuda: device index ", device, " out of range [0, ", kMaxDevices,
            ")");
}

thread_local std::array<StreamHandle, kMaxDevices> t_streams{};
// Side streams live as long as the thread (never destroyed: work may still be queued on them at exit).
thread_local std::array<StreamHandle, kMaxDevices> t_side_streams{};
// Capture streams (CUDA graphs), kept for the thread's life like the side streams.
thread_local std::array<StreamHandle, kMaxDevices> t_capture_streams{};

StreamHandle create_stream(int device, unsigned flags) {
  const DeviceGuard guard(Device::cuda(device));
  cudaStream_t stream = nullptr;
  VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, flags));
  return stream;
}

std::mutex g_record_mutex;
std::array<IndexErrorRecord*, kMaxDevices> g_records{};

}  // namespace

StreamHandle current_stream(int device) {
  check_device_index(device);
  return t_streams[static_cast<size_t>(device)];
}

void set_current_stream(int device, StreamHandle stream) {
  check_device_index(device);
  t_streams[static_cast<size_t>(device)] = stream;
}

StreamHandle side_stream(int device) {
  check_device_index(device);
  StreamHandle& s = t_side_streams[static_cast<size_t>(device)];
  if (s == nullptr) s = create_stream(device, cudaStreamNonBlocking);
  return s;
}

StreamHandle capture_stream(int device) {
  check_device_index(device);
  StreamHandle& s = t_capture_streams[static_cast<size_t>(device)];
  if (s == nullptr) s = create_stream(device, cudaStreamNonBlocking);
  return s;
}

namespace {
// One event per (thread, device), reused by every stream_wait: cudaStreamWaitEvent waits for the work the event
// captured when it was called, so recording the event again afterwards cannot change an earlier wait. (Creating and
// destroying an event per call cost two driver calls each time, ~350 times per training step.) Destroyed with the
// thread.
struct ThreadEvents {
  std::array<cudaEvent_t, kMaxDevices> events{};
  ~ThreadEvents() {
    for (cudaEvent_t e : events)
      if (e != nullptr) (void)cudaEventDestroy(e);
  }
};
thread_local ThreadEvents t_events;
}  // namespace

void stream_wait(int device, StreamHandle waiter, StreamHandle signaler) {
  check_device_index(device);
  const DeviceGuard guard(Device::cuda(device));
  cudaEvent_t& event = t_events.events[static_cast<size_t>(device)];
  if (event == nullptr) VLM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  VLM_CUDA_CHECK(cudaEventRecord(event, static_cast<cudaStream_t>(signaler)));
  VLM_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(waiter), event, 0));
}

DeviceGuard::DeviceGuard(Device device) {
  VLM_CHECK(device.is_cuda(), "DeviceGuard: ", device.to_string(), " is not a CUDA device");
  VLM_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device.index) VLM_CUDA_CHECK(cudaSetDevice(device.index));
  else previous_ = -1;  // nothing to restore
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

Tensor scratch(const Shape& shape, DType dtype, Device device) {
  return Tensor::empty(shape, dtype, device, current_stream(device));
}

const char* index_error_op_name(int32_t code) {
  switch (static_cast<IndexErrorOp>(code)) {
    case IndexErrorOp::none: return "none";
    case IndexErrorOp::embedding_forward: return "embedding_forward (ids)";
    case IndexErrorOp::embedding_backward: return "embedding_backward (ids)";
    case IndexErrorOp::cross_entropy: return "cross_entropy (targets)";
    case IndexErrorOp::scatter_rows: return "scatter_rows (index)";
    case IndexErrorOp::gather_rows: return "gather_rows (index)";
    case IndexErrorOp::attention_cu_seqlens: return "attention (cu_seqlens)";
    case IndexErrorOp::paged_kv_slots: return "paged_kv_write (slot_mapping)";
    case IndexErrorOp::paged_cu_seqlens: return "paged_attention (cu_seqlens_q)";
    case IndexErrorOp::paged_context_lens: return "paged_attention (context_lens)";
    case IndexErrorOp::paged_block_tables: return "paged_attention (block_tables)";
    case IndexErrorOp::qkv_paged_slots: return "qkv_split_paged_write (slot_mapping)";
  }
  return "unknown op";
}

IndexErrorRecord* index_error_record(Device device) {
  check_device_index(device.index);
  std::lock_guard<std::mutex> lock(g_record_mutex);
  IndexErrorRecord*& rec = g_records[static_cast<size_t>(device.index)];
  if (rec == nullptr) {
    DeviceGuard guard(device);
    void* p = nullptr;
    VLM_CUDA_CHECK(cudaMalloc(&p, sizeof(IndexErrorRecord)));
    VLM_CUDA_CHECK(cudaMemset(p, 0, sizeof(IndexErrorRecord)));
    VLM_CUDA_CHECK(cudaDeviceSynchronize());
    rec = static_cast<IndexErrorRecord*>(p);
  }
  return rec;
}

Status take_index_error(Device device) {
  DeviceGuard guard(device);
  IndexErrorRecord* rec = index_error_record(device);
  auto stream = static_cast<cudaStream_t>(current_stream(device));
  IndexErrorRecord host;
  VLM_CUDA_CHECK(cudaMemcpyAsync(&host, rec, sizeof(host), cudaMemcpyDeviceToHost, stream));
  VLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host.op == 0) return Status();
  VLM_CUDA_CHECK(cudaMemsetAsync(rec, 0, sizeof(IndexErrorRecord), stream));
  const char* what = index_error_op_name(host.op);
  if (static_cast<IndexErrorOp>(host.op) == IndexErrorOp::scatter_rows && host.value >= 0 && host.value < host.limit)
    return out_of_range(str("ops::", what, ": entry ", host.position, " = ", host.value,
                            " repeats an earlier index (must be distinct) on ", device.to_string()));
  if (static_cast<IndexErrorOp>(host.op) == IndexErrorOp::paged_context_lens)
    return out_of_range(str("ops::", what, ": entry ", host.position, " = ", host.value,
                            " is below the sequence's query count or above ", host.limit,
                            " (max_context_len and the block table's capacity) on ", device.to_string()));
  if (static_cast<IndexErrorOp>(host.op) == IndexErrorOp::paged_kv_slots ||
      static_cast<IndexErrorOp>(host.op) == IndexErrorOp::qkv_paged_slots)
    return out_of_range(str("ops::", what, ": entry ", host.position, " = ", host.value, " is outside [-1, ",
                            host.limit, ") on ", device.to_string()));
  if (static_cast<IndexErrorOp>(host.op) == IndexErrorOp::attention_cu_seqlens ||
      static_cast<IndexErrorOp>(host.op) == IndexErrorOp::paged_cu_seqlens)
    return out_of_range(str("ops::", what, ": entry ", host.position, " = ", host.value,
                            " breaks 0 = cu[0] <= ... <= cu[B] = rows (", host.limit, ") or exceeds max_seqlen on ",
                            device.to_string()));
  return out_of_range(str("ops::", what, ": entry ", host.position, " = ", host.value, " is outside [0, ", host.limit,
                          ") on ", device.to_string()));
}

void check_index_errors_now(const char* op, Device device) {
  if (!::vlm::detail::cuda_sync_after_launch()) return;
  const Status s = take_index_error(device);
  VLM_CHECK(s.ok(), "ops::", op, ": ", s.message());
}

}  // namespace vlm::ops::cuda
