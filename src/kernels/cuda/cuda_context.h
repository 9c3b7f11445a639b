// The CUDA execution context of the ops (no CUDA headers here, so host code may include it): the current stream of
// each device, a device guard, scratch tensors on the current stream, and the index-error record that kernels reading
// ids/targets/indices write instead of aborting (a device cannot abort with a message without a host sync).
// Only built with VLM_CUDA.
#pragma once

#include <cstdint>

#include "core/allocator.h"
#include "core/status.h"
#include "core/tensor.h"

namespace vlm::ops::cuda {

// The stream the ops launch on for `device` (per host thread; nullptr, the legacy default stream, until set).
StreamHandle current_stream(int device);
void set_current_stream(int device, StreamHandle stream);
inline StreamHandle current_stream(Device device) { return current_stream(device.index); }

// A second stream of `device` (per host thread, created on first use, not synchronizing with the legacy default
// stream) for work that overlaps the current stream's: the weight gradients of linear_backward (gemm.cpp).
StreamHandle side_stream(int device);
// The stream CUDA graphs are captured on (per host thread, created on first use, non-blocking). One per thread, so
// that cuBLASLt, which keys its workspace by stream, gives every graph of the thread the same workspace.
StreamHandle capture_stream(int device);
// Enqueues on `waiter` a wait for everything enqueued on `signaler` so far (an event recorded on `signaler`).
void stream_wait(int device, StreamHandle waiter, StreamHandle signaler);

// Makes `device` the current CUDA device for the scope and restores the previous one on exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// An uninitialized tensor on `device`, allocated on its current stream (the caching allocator reuses it in stream
// order once it is freed, so temporaries need no synchronization).
Tensor scratch(const Shape& shape, DType dtype, Device device);

// Which op met a bad index (codes stored in the record; 0 = no error).
enum class IndexErrorOp : int32_t {
  none = 0,
  embedding_forward,
  embedding_backward,
  cross_entropy,
  scatter_rows,
  gather_rows,
  attention_cu_seqlens,
  paged_kv_slots,
  paged_cu_seqlens,
  paged_context_lens,
  paged_block_tables,
  qkv_paged_slots,  // qkv_split_paged_write's slot_mapping (reported like paged_kv_slots)
};
const char* index_error_op_name(int32_t code);

// The first bad index a kernel met on one device: ops[position] = value was outside [0, limit) (or, for
// scatter_rows, repeated an earlier index; for cu_seqlens, broke 0 = cu[0] <= ... <= cu[B] = rows; for a paged
// context length, was below its sequence's query count or above `limit`, the bound its table and max_context_len
// allow; for block_tables, position is the row-major entry b * max_blocks_per_seq + j).
struct IndexErrorRecord {
  int32_t op = 0;  // an IndexErrorOp; kernels claim the record with atomicCAS(op, 0, code)
  int32_t pad = 0;
  int64_t position = 0;
  int64_t value = 0;
  int64_t limit = 0;
};

// The device-memory record of `device` (allocated and zeroed on first use).
IndexErrorRecord* index_error_record(Device device);
// Synchronizes the current stream, then returns (and clears) the first recorded error as a Status naming the op,
// the position and the bad value; ok when none was recorded.
Status take_index_error(Device device);
// With VLM_CUDA_SYNC=1 (the debug mode that syncs after every launch), aborts right away naming `op` when a kernel
// recorded an index error; otherwise does nothing (the caller checks with ops::check_index_errors).
void check_index_errors_now(const char* op, Device device);

}  // namespace vlm::ops::cuda
