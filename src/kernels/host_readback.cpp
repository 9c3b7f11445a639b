// ops::HostReadback: a small device tensor's copy to the host, waited for only when read. On CUDA each readback
// takes a slot from a per-device pool (kSlotBytes of pinned memory and an event, created once and reused: pinned
// allocation is slow and freeing it synchronizes the device); a slot whose readback is dropped unread goes back to
// the pool only once its event has completed, so no copy ever lands in a reused slot. Larger tensors are copied
// synchronously when the readback is made.
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "kernels/ops.h"

#ifdef VLM_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#endif

namespace vlm::ops {

namespace {

constexpr size_t kSlotBytes = 256;  // losses and norms are one f64; a few values fit

#ifdef VLM_HAVE_CUDA
struct Slot {
  void* pinned = nullptr;
  cudaEvent_t event = nullptr;
};

// Free slots per device, and slots dropped while their copy may still run (recycled once their event is done).
class SlotPool {
 public:
  static SlotPool& get() {
    static SlotPool* pool = new SlotPool();  // leaked on purpose: readbacks may outlive static destruction order
    return *pool;
  }

  Slot take(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& pending = pending_[device];
    for (size_t i = 0; i < pending.size();) {
      if (cudaEventQuery(pending[i].event) == cudaSuccess) {
        free_[device].push_back(pending[i]);
        pending[i] = pending.back();
        pending.pop_back();
      } else {
        ++i;
      }
    }
    auto& free = free_[device];
    if (free.empty()) {
      Slot s;
      VLM_CUDA_CHECK(cudaHostAlloc(&s.pinned, kSlotBytes, cudaHostAllocDefault));
      VLM_CUDA_CHECK(cudaEventCreateWithFlags(&s.event, cudaEventDisableTiming));
      return s;
    }
    Slot s = free.back();
    free.pop_back();
    return s;
  }

  // `done`: the slot's copy is known to be complete.
  void give_back(int device, Slot s, bool done) {
    std::lock_guard<std::mutex> lock(mu_);
    (done ? free_ : pending_)[device].push_back(s);
  }

 private:
  std::mutex mu_;
  std::map<int, std::vector<Slot>> free_, pending_;
};
#endif

}  // namespace

struct HostReadback::Impl {
  Tensor host;        // the value once read (or at once, for a synchronous copy)
  bool ready = false;
#ifdef VLM_HAVE_CUDA
  int device = -1;    // >= 0: an async copy into `slot`
  Slot slot;

  ~Impl() {
    if (device >= 0) SlotPool::get().give_back(device, slot, ready);
  }
#endif
};

HostReadback::HostReadback(const Tensor& t) : impl_(std::make_shared<Impl>()) {
  VLM_CHECK(t.defined(), "ops::HostReadback: undefined tensor");
#ifdef VLM_HAVE_CUDA
  if (t.device().is_cuda() && t.is_contiguous() && t.nbytes() <= kSlotBytes) {
    const int dev = t.device().index;
    cuda::DeviceGuard guard(t.device());
    cudaStream_t stream = static_cast<cudaStream_t>(cuda::current_stream(dev));
    impl_->slot = SlotPool::get().take(dev);
    impl_->device = dev;
    impl_->host = Tensor::empty(t.shape(), t.dtype());
    VLM_CUDA_CHECK(cudaMemcpyAsync(impl_->slot.pinned, t.raw_data(), t.nbytes(), cudaMemcpyDeviceToHost, stream));
    VLM_CUDA_CHECK(cudaEventRecord(impl_->slot.event, stream));
    return;
  }
#endif
  impl_->host = t.device().is_cpu() ? t.clone() : t.to(Device::cpu());
  impl_->ready = true;
}

const Tensor& HostReadback::get() const {
  VLM_CHECK(impl_ != nullptr, "ops::HostReadback: read of an empty readback");
  if (!impl_->ready) {
#ifdef VLM_HAVE_CUDA
    VLM_CUDA_CHECK(cudaEventSynchronize(impl_->slot.event));
    std::memcpy(impl_->host.raw_data(), impl_->slot.pinned, impl_->host.nbytes());
#endif
    impl_->ready = true;
  }
  return impl_->host;
}

double HostReadback::scalar_f64() const {
  const Tensor& t = get();
  VLM_CHECK(t.dtype() == DType::f64 && t.numel() == 1, "ops::HostReadback::scalar_f64 on ", t.describe());
  return t.data<double>()[0];
}

}  // namespace vlm::ops
