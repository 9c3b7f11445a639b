// BatchUploader: slot bookkeeping on every device; pinned staging, one async copy per batch and the stream/event
// ordering on CUDA.
#include "train/device_batch.h"

#include <array>
#include <cstring>
#include <vector>

#ifdef VLM_HAVE_CUDA
#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#endif

namespace vlm {

VlmInputs to_model_inputs(const PackedBatch& b, Device dev) {
  auto i32 = [&](const std::vector<int32_t>& v) {
    return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(dev);
  };
  VlmInputs in;
  in.images = b.images.defined() ? b.images.to(dev) : Tensor();
  in.tokens = i32(b.tokens);
  in.positions = i32(b.positions);
  in.cu_seqlens = i32(b.cu_seqlens);
  in.max_seqlen = b.max_seqlen;
  in.image_rows = i32(b.image_rows);
  in.loss_rows = i32(b.loss_rows);
  in.loss_targets = i32(b.loss_targets);
  return in;
}

namespace {

#ifdef VLM_HAVE_CUDA
// The arrays of one batch in the order they lie in a slot's buffer; segment 0 is the f32 images.
constexpr int kSegments = 7;
constexpr size_t kSegmentAlign = 256;  // every segment starts on a 256-byte boundary (vector loads, cuBLAS)

struct Layout {
  std::array<size_t, kSegments> offset{}, bytes{};
  size_t total = 0;
};

size_t align_up(size_t n) { return (n + kSegmentAlign - 1) / kSegmentAlign * kSegmentAlign; }

std::array<const std::vector<int32_t>*, kSegments - 1> int_arrays(const PackedBatch& b) {
  return {&b.tokens, &b.positions, &b.cu_seqlens, &b.image_rows, &b.loss_rows, &b.loss_targets};
}

Layout layout_of(const PackedBatch& b) {
  Layout l;
  l.bytes[0] = b.images.defined() ? b.images.nbytes() : 0;
  const auto ints = int_arrays(b);
  for (int s = 1; s < kSegments; ++s) l.bytes[static_cast<size_t>(s)] = ints[static_cast<size_t>(s - 1)]->size() * 4;
  for (size_t s = 0; s < kSegments; ++s) {
    l.offset[s] = l.total;
    l.total += align_up(l.bytes[s]);
  }
  return l;
}
#endif

// Broken batches are loader bugs: abort naming the field.
void check_batch(const PackedBatch& b) {
  VLM_CHECK(b.tokens.size() == b.positions.size(), "BatchUploader: batch positions has ", b.positions.size(),
            " entries for ", b.tokens.size(), " tokens");
  VLM_CHECK(b.loss_rows.size() == b.loss_targets.size(), "BatchUploader: batch loss_targets has ",
            b.loss_targets.size(), " entries for ", b.loss_rows.size(), " loss_rows");
  VLM_CHECK(!b.cu_seqlens.empty(), "BatchUploader: batch cu_seqlens is empty (needs B+1 >= 1 entries)");
  if (b.images.defined()) {
    VLM_CHECK(b.images.dtype() == DType::f32 && b.images.ndim() == 4 && b.images.device().is_cpu() &&
                  b.images.is_contiguous(),
              "BatchUploader: batch images must be a contiguous f32 [N, C, H, W] CPU tensor, got ",
              b.images.describe());
  }
}

}  // namespace

struct BatchUploader::Impl {
  struct Slot {
    bool held = false;  // uploaded and not yet released
    uint64_t id = 0;
#ifdef VLM_HAVE_CUDA
    void* staging = nullptr;  // pinned host memory
    size_t staging_bytes = 0;
    Tensor buffer;            // u8 [capacity] on the device
    std::shared_ptr<void> owner;  // keeps `buffer` alive for the views handed out
    cudaEvent_t copied = nullptr;    // on the copy stream after the copy into this slot
    cudaEvent_t released = nullptr;  // on the compute stream after the last step that read this slot
    bool acquired = false;
#endif
  };
  std::vector<Slot> slots;
  int next = 0;
  uint64_t uploads = 0;
#ifdef VLM_HAVE_CUDA
  cudaStream_t copy_stream = nullptr;
  cudaEvent_t compute_now = nullptr;  // a point on the compute stream, for buffers that grew
#endif
};

BatchUploader::BatchUploader(Device device, int slots) : device_(device), impl_(std::make_unique<Impl>()) {
  VLM_CHECK(slots >= 1, "BatchUploader: needs at least one slot, got ", slots);
  impl_->slots.resize(static_cast<size_t>(slots));
  if (device.is_cpu()) return;
#ifdef VLM_HAVE_CUDA
  ops::cuda::DeviceGuard guard(device);
  // Non-blocking: the copies must not serialize with the legacy default stream the ops may run on.
  VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->copy_stream, cudaStreamNonBlocking));
  VLM_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->compute_now, cudaEventDisableTiming));
  for (auto& s : impl_->slots) {
    VLM_CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
    VLM_CUDA_CHECK(cudaEventCreateWithFlags(&s.released, cudaEventDisableTiming));
  }
#else
  VLM_FAIL("BatchUploader: ", device.to_string(), " requested, but this binary was built without CUDA");
#endif
}

BatchUploader::~BatchUploader() {
#ifdef VLM_HAVE_CUDA
  if (!impl_->copy_stream) return;
  ops::cuda::DeviceGuard guard(device_);
  // Copies still in flight write into buffers that may outlive us (views handed out) or be reused by the caching
  // allocator once freed, and read staging memory freed below: let them finish first.
  VLM_CUDA_CHECK(cudaStreamSynchronize(impl_->copy_stream));
  for (auto& s : impl_->slots) {
    if (s.staging) pinned_allocator().deallocate(s.staging, s.staging_bytes);
    VLM_CUDA_CHECK(cudaEventDestroy(s.copied));
    VLM_CUDA_CHECK(cudaEventDestroy(s.released));
  }
  VLM_CUDA_CHECK(cudaEventDestroy(impl_->compute_now));
  VLM_CUDA_CHECK(cudaStreamDestroy(impl_->copy_stream));
#endif
}

int BatchUploader::slots() const { return static_cast<int>(impl_->slots.size()); }

uint64_t BatchUploader::pinned_bytes() const {
  uint64_t n = 0;
#ifdef VLM_HAVE_CUDA
  for (const auto& s : impl_->slots) n += s.staging_bytes;
#endif
  return n;
}

uint64_t BatchUploader::device_bytes() const {
  uint64_t n = 0;
#ifdef VLM_HAVE_CUDA
  for (const auto& s : impl_->slots) n += s.buffer.defined() ? s.buffer.nbytes() : 0;
#endif
  return n;
}

UploadedBatch BatchUploader::upload(const PackedBatch& batch) {
  check_batch(batch);
  const int k = impl_->next;
  Impl::Slot& slot = impl_->slots[static_cast<size_t>(k)];
  VLM_CHECK(!slot.held, "BatchUploader: slot ", k, " still holds upload ", slot.id,
            ", which was not released: at most ", slots(), " batches may be in flight");
  impl_->next = (k + 1) % slots();
  slot.held = true;
  slot.id = ++impl_->uploads;
  UploadedBatch out;
  out.slot = k;
  out.id = slot.id;
  if (device_.is_cpu()) {
    out.inputs = to_model_inputs(batch, device_);
    return out;
  }
#ifdef VLM_HAVE_CUDA
  ops::cuda::DeviceGuard guard(device_);
  const Layout l = layout_of(batch);
  // The staging buffer may still feed this slot's previous copy.
  VLM_CUDA_CHECK(cudaEventSynchronize(slot.copied));
  if (slot.staging_bytes < l.total) {
    if (slot.staging) pinned_allocator().deallocate(slot.staging, slot.staging_bytes);
    slot.staging_bytes = l.total + l.total / 4;  // headroom: packed batches vary in length
    slot.staging = pinned_allocator().allocate(slot.staging_bytes);
  }
  auto* host = static_cast<char*>(slot.staging);
  if (l.bytes[0]) std::memcpy(host + l.offset[0], batch.images.raw_data(), l.bytes[0]);
  const auto ints = int_arrays(batch);
  for (size_t s = 1; s < kSegments; ++s)
    if (l.bytes[s]) std::memcpy(host + l.offset[s], ints[s - 1]->data(), l.bytes[s]);

  auto compute = static_cast<cudaStream_t>(ops::cuda::current_stream(device_));
  if (!slot.buffer.defined() || slot.buffer.nbytes() < l.total) {
    // Dropping the old buffer is safe: every copy into it was waited for by the compute stream (acquire or
    // release) before the ops that read it, and it returns to the compute stream's free list.
    slot.buffer = Tensor::empty({static_cast<int64_t>(slot.staging_bytes)}, DType::u8, device_, compute);
    slot.owner = std::make_shared<Tensor>(slot.buffer);
    VLM_CUDA_CHECK(cudaEventRecord(impl_->compute_now, compute));
    VLM_CUDA_CHECK(cudaStreamWaitEvent(impl_->copy_stream, impl_->compute_now, 0));
  }
  VLM_CUDA_CHECK(cudaStreamWaitEvent(impl_->copy_stream, slot.released, 0));  // no-op before the first release
  auto* dev = static_cast<char*>(slot.buffer.raw_data());
  VLM_CUDA_CHECK(cudaMemcpyAsync(dev, host, l.total, cudaMemcpyHostToDevice, impl_->copy_stream));
  VLM_CUDA_CHECK(cudaEventRecord(slot.copied, impl_->copy_stream));
  slot.acquired = false;

  auto view = [&](size_t s, const Shape& shape, DType dtype) {
    return Tensor::borrow(dev + l.offset[s], shape, dtype, device_, slot.owner);
  };
  auto i32 = [&](size_t s) { return view(s, {static_cast<int64_t>(ints[s - 1]->size())}, DType::i32); };
  VlmInputs& in = out.inputs;
  if (batch.images.defined()) in.images = view(0, batch.images.shape(), DType::f32);
  in.tokens = i32(1);
  in.positions = i32(2);
  in.cu_seqlens = i32(3);
  in.image_rows = i32(4);
  in.loss_rows = i32(5);
  in.loss_targets = i32(6);
  in.max_seqlen = batch.max_seqlen;
#endif
  return out;
}

namespace {
// The slot of a handle, checked against the uploader's bookkeeping.
template <class Slots>
auto& slot_of(Slots& slots, const UploadedBatch& b, const char* what) {
  VLM_CHECK(b.slot >= 0 && b.slot < static_cast<int>(slots.size()), "BatchUploader::", what, ": slot ", b.slot,
            " is not one of the ", slots.size(), " slots");
  auto& s = slots[static_cast<size_t>(b.slot)];
  VLM_CHECK(s.held && s.id == b.id, "BatchUploader::", what, ": upload ", b.id, " is no longer in slot ", b.slot,
            " (released already, or the slot was refilled)");
  return s;
}
}  // namespace

void BatchUploader::acquire(const UploadedBatch& b) {
  [[maybe_unused]] auto& s = slot_of(impl_->slots, b, "acquire");
  if (device_.is_cpu()) return;
#ifdef VLM_HAVE_CUDA
  ops::cuda::DeviceGuard guard(device_);
  auto compute = static_cast<cudaStream_t>(ops::cuda::current_stream(device_));
  VLM_CUDA_CHECK(cudaStreamWaitEvent(compute, s.copied, 0));
  s.acquired = true;
#endif
}

void BatchUploader::release(const UploadedBatch& b) {
  auto& s = slot_of(impl_->slots, b, "release");
  s.held = false;
  if (device_.is_cpu()) return;
#ifdef VLM_HAVE_CUDA
  ops::cuda::DeviceGuard guard(device_);
  auto compute = static_cast<cudaStream_t>(ops::cuda::current_stream(device_));
  // A batch released unread still orders the slot's next copy after this one (same stream) and the buffer's
  // eventual reuse by the compute stream after it.
  if (!s.acquired) VLM_CUDA_CHECK(cudaStreamWaitEvent(compute, s.copied, 0));
  VLM_CUDA_CHECK(cudaEventRecord(s.released, compute));
#endif
}

}  // namespace vlm
