// Tensor, Shape and Storage implementation; cross-device copies go through cudaMemcpyAsync when built with CUDA.
#include "core/tensor.h"

#include <cstring>
#include <sstream>

#ifdef VLM_HAVE_CUDA
#include "core/cuda_check.h"
#endif

namespace vlm {

Shape::Shape(std::initializer_list<int64_t> dims) {
  VLM_CHECK(dims.size() <= kMaxDims, "shape has ", dims.size(), " dims; at most ", kMaxDims);
  for (int64_t v : dims) d_[static_cast<size_t>(n_++)] = v;
}

Shape::Shape(const std::vector<int64_t>& dims) {
  VLM_CHECK(dims.size() <= kMaxDims, "shape has ", dims.size(), " dims; at most ", kMaxDims);
  for (int64_t v : dims) d_[static_cast<size_t>(n_++)] = v;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < n_; ++i) n *= d_[static_cast<size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (n_ != o.n_) return false;
  for (int i = 0; i < n_; ++i)
    if (d_[static_cast<size_t>(i)] != o.d_[static_cast<size_t>(i)]) return false;
  return true;
}

std::string Shape::to_string() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < n_; ++i) os << (i ? ", " : "") << d_[static_cast<size_t>(i)];
  os << ']';
  return os.str();
}

Shape contiguous_strides(const Shape& shape) {
  Shape s = shape;
  int64_t acc = 1;
  for (int i = shape.ndim() - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

Storage::Storage(size_t bytes, Device device, StreamHandle stream)
    : bytes_(bytes), device_(device), allocator_(&allocator_for(device)), stream_(stream) {
  data_ = allocator_->allocate(bytes, stream);
}

Storage::Storage(void* data, size_t bytes, Device device, std::shared_ptr<void> owner)
    : data_(data), bytes_(bytes), device_(device), owner_(std::move(owner)) {}

Storage::~Storage() {
  if (allocator_) allocator_->deallocate(data_, bytes_, stream_);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, StreamHandle stream) {
  for (int i = 0; i < shape.ndim(); ++i) VLM_CHECK(shape[i] >= 0, "negative dimension in ", shape.to_string());
  Tensor t;
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(shape.numel()) * dtype_size(dtype), device, stream);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::full(const Shape& shape, float value, Device device) {
  Tensor t = empty(shape, DType::f32, Device::cpu());
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = value;
  return device.is_cpu() ? t : t.to(device);
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype, Device device, std::shared_ptr<void> owner) {
  Tensor t;
  t.storage_ = std::make_shared<Storage>(data, static_cast<size_t>(shape.numel()) * dtype_size(dtype), device,
                                         std::move(owner));
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  return t;
}

int64_t Tensor::dim(int i) const {
  int n = shape_.ndim();
  if (i < 0) i += n;
  VLM_CHECK(i >= 0 && i < n, "dim ", i, " out of range for ", describe());
  return shape_[i];
}

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (int i = shape_.ndim() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expect) return false;
    expect *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  VLM_CHECK(defined(), "access to an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_;
}

Tensor Tensor::view(const Shape& shape) const {
  VLM_CHECK(is_contiguous(), "view() of a non-contiguous tensor ", describe());
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < s.ndim(); ++i) {
    if (s[i] == -1) {
      VLM_CHECK(infer < 0, "view(): more than one -1 in ", shape.to_string());
      infer = i;
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    VLM_CHECK(known > 0 && numel() % known == 0, "view(): cannot infer -1 in ", shape.to_string(), " from ",
              describe());
    s[infer] = numel() / known;
  }
  VLM_CHECK(s.numel() == numel(), "view(): ", s.to_string(), " does not match ", describe());
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Tensor Tensor::slice(int d, int64_t start, int64_t end) const {
  if (d < 0) d += ndim();
  VLM_CHECK(d >= 0 && d < ndim(), "slice(): bad dim for ", describe());
  VLM_CHECK(0 <= start && start <= end && end <= shape_[d], "slice(): [", start, ", ", end, ") out of range for dim ",
            d, " of ", describe());
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(start * strides_[d]) * dtype_size(dtype_);
  t.shape_[d] = end - start;
  return t;
}

namespace {
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes, StreamHandle stream) {
  if (bytes == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef VLM_HAVE_CUDA
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  VLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  // Host-side buffers may be freed right after return: make host<->device copies complete before returning.
  if (dst_dev.is_cpu() || src_dev.is_cpu()) VLM_CUDA_CHECK(cudaStreamSynchronize(s));
#else
  VLM_FAIL("copy between ", src_dev.to_string(), " and ", dst_dev.to_string(), " needs a CUDA build");
#endif
}
}  // namespace

void Tensor::copy_from(const Tensor& src, StreamHandle stream) {
  VLM_CHECK(shape_ == src.shape_ && dtype_ == src.dtype_, "copy_from: ", src.describe(), " into ", describe());
  VLM_CHECK(is_contiguous() && src.is_contiguous(), "copy_from needs contiguous tensors");
  copy_bytes(raw_data(), device(), src.raw_data(), src.device(), nbytes(), stream);
}

Tensor Tensor::to(Device target) const {
  if (device() == target && is_contiguous()) return *this;
  VLM_CHECK(is_contiguous(), "to(device) of a non-contiguous tensor ", describe());
  Tensor t = empty(shape_, dtype_, target);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype_) return *this;
  VLM_CHECK(device().is_cpu() && is_contiguous(), "to(dtype) runs on contiguous CPU tensors, got ", describe());
  Tensor t = empty(shape_, target);
  const int64_t n = numel();
  auto load = [&](int64_t i) -> float { return item_f32(i); };
  switch (target) {
    case DType::f32: {
      float* o = t.data<float>();
      for (int64_t i = 0; i < n; ++i) o[i] = load(i);
      break;
    }
    case DType::bf16: {
      auto* o = static_cast<uint16_t*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16(load(i));
      break;
    }
    case DType::f16: {
      auto* o = static_cast<uint16_t*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) o[i] = f32_to_f16(load(i));
      break;
    }
    default:
      VLM_FAIL("to(dtype): conversion to ", dtype_name(target), " is not supported");
  }
  return t;
}

Tensor Tensor::clone() const {
  VLM_CHECK(is_contiguous(), "clone() of a non-contiguous tensor");
  Tensor t = empty(shape_, dtype_, device());
  t.copy_from(*this);
  return t;
}

void Tensor::zero_(StreamHandle stream) {
  VLM_CHECK(is_contiguous(), "zero_() of a non-contiguous tensor");
  if (nbytes() == 0) return;
  if (device().is_cpu()) {
    std::memset(raw_data(), 0, nbytes());
    return;
  }
#ifdef VLM_HAVE_CUDA
  VLM_CUDA_CHECK(cudaMemsetAsync(raw_data(), 0, nbytes(), static_cast<cudaStream_t>(stream)));
#endif
}

float Tensor::item_f32(int64_t i) const {
  VLM_CHECK(device().is_cpu(), "item_f32 on ", device().to_string(), ": copy to the CPU first");
  VLM_CHECK(i >= 0 && i < numel(), "item_f32(", i, ") out of range for ", describe());
  VLM_CHECK(is_contiguous(), "item_f32 needs a contiguous tensor");
  const char* p = static_cast<const char*>(raw_data());
  switch (dtype_) {
    case DType::f32: return reinterpret_cast<const float*>(p)[i];
    case DType::bf16: return bf16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
    case DType::f16: return f16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
    case DType::i32: return static_cast<float>(reinterpret_cast<const int32_t*>(p)[i]);
    case DType::i64: return static_cast<float>(reinterpret_cast<const int64_t*>(p)[i]);
    case DType::u8: return static_cast<float>(reinterpret_cast<const uint8_t*>(p)[i]);
    case DType::f64: return static_cast<float>(reinterpret_cast<const double*>(p)[i]);
  }
  return 0.f;
}

std::string Tensor::describe() const {
  if (!defined()) return "<undefined tensor>";
  return std::string(dtype_name(dtype_)) + shape_.to_string() + " " + device().to_string();
}

}  // namespace vlm
