// Reused batch buffers (see batch_buffer_pool.h). A buffer is free when the pool holds the only reference to it:
// tensors share ownership through Tensor::borrow's owner, and only a holder of a tensor can add references, so a
// use count of 1 cannot grow behind the pool's back.
#include "data/loader/batch_buffer_pool.h"

#include "core/allocator.h"

namespace vlm {

struct BatchBufferPool::Buffer {
  void* data = nullptr;
  size_t bytes = 0;
  explicit Buffer(size_t n) : data(cpu_allocator().allocate(n)), bytes(n) {}
  ~Buffer() { cpu_allocator().deallocate(data, bytes); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

Tensor BatchBufferPool::get_f32(const Shape& shape) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * sizeof(float);
  std::shared_ptr<Buffer> buffer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = buffers_.begin(); it != buffers_.end(); ++it) {
      if (it->use_count() != 1) continue;
      if ((*it)->bytes >= bytes) {
        buffer = *it;
        break;
      }
      buffers_.erase(it);  // free but too small (the shape grew): dropped, a large enough one replaces it
      break;
    }
    if (!buffer) {
      buffer = std::make_shared<Buffer>(bytes);
      if (buffers_.size() < max_cached_) buffers_.push_back(buffer);
    }
  }
  return Tensor::borrow(buffer->data, shape, DType::f32, Device::cpu(), buffer);
}

size_t BatchBufferPool::cached() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buffers_.size();
}

}  // namespace vlm
