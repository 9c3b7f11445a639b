// Host->device batches for the trainer, double-buffered so the copy of the next batch overlaps the current step.
// On CUDA a BatchUploader keeps `slots` slots; each holds a pinned host staging buffer and a device buffer with
// every array of one PackedBatch back to back, so one batch is one cudaMemcpyAsync on the uploader's own stream:
//   upload(b)   -> slot k = the next slot. The host waits for slot k's previous copy (its staging buffer is
//                  rewritten); the copy stream waits for the compute stream to have run every op that read slot k
//                  (release below), then copies. Returns inputs that are views of slot k's device buffer.
//   acquire(u)  -> the compute stream waits for u's copy: call before the step's first op reads u.
//   release(u)  -> records on the compute stream that every op reading u has been launched (call after the step's
//                  forward/backward returns); slot k may then be refilled once the device has run those ops.
// The compute stream is the ops' current stream of the device (kernels/cuda/cuda_context.h) at each call. A slot
// that must grow gets a new device buffer allocated on the compute stream, and the copy into it also waits for
// everything issued on the compute stream so far (the caching allocator may hand back a block that stream used).
// On the CPU nothing is copied: upload() builds the inputs exactly as the plain path always did (host tensors of
// the batch's vectors, the images tensor shared); acquire/release only keep the slot bookkeeping, so misuse fails
// the same way on every device.
// Not thread-safe: one uploader per training thread. Broken usage (a slot refilled before its batch was released,
// an inconsistent batch) aborts naming the slot or field.
#pragma once

#include <memory>

#include "data/loader/vlm_batch.h"
#include "model/vlm.h"

namespace vlm {

// A batch on its way to (or on) the device.
struct UploadedBatch {
  VlmInputs inputs;  // the model's inputs; on CUDA views of the slot's device buffer (valid after acquire())
  int slot = -1;     // which slot holds it
  uint64_t id = 0;   // upload sequence number (1, 2, ...), to catch a stale handle
};

class BatchUploader {
 public:
  explicit BatchUploader(Device device, int slots = 2);
  ~BatchUploader();
  BatchUploader(const BatchUploader&) = delete;
  BatchUploader& operator=(const BatchUploader&) = delete;

  // Starts moving `batch` to the device (see the file comment). Aborts when the next slot still holds a batch that
  // was not released: at most `slots` batches may be in flight.
  UploadedBatch upload(const PackedBatch& batch);
  // Orders the compute stream after the batch's copy.
  void acquire(const UploadedBatch& batch);
  // The step reading the batch has been launched; the slot may be refilled once the device has run it.
  void release(const UploadedBatch& batch);

  Device device() const { return device_; }
  int slots() const;
  // Bytes held by the slots: pinned host staging and device buffers (0 on the CPU).
  uint64_t pinned_bytes() const;
  uint64_t device_bytes() const;

 private:
  struct Impl;
  Device device_;
  std::unique_ptr<Impl> impl_;
};

// The model's inputs on `device` built with plain synchronous copies (what the trainer did before BatchUploader;
// also the CPU path of upload()).
VlmInputs to_model_inputs(const PackedBatch& batch, Device device);

}  // namespace vlm
