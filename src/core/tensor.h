// Tensor: a typed, strided view of reference-counted storage on one device.
// Copying a Tensor shares its storage (like torch.Tensor); clone() copies the data. Shapes have at most kMaxDims
// dimensions. Most ops require contiguous row-major tensors; views (slice, view) keep sharing storage.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"

namespace vlm {

constexpr int kMaxDims = 6;

// A small fixed-capacity list of dimension sizes (or strides).
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int ndim() const { return n_; }
  int64_t operator[](int i) const { return d_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return d_[static_cast<size_t>(i)]; }
  int64_t numel() const;
  std::vector<int64_t> to_vector() const { return {d_.begin(), d_.begin() + n_}; }
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string to_string() const;  // "[2, 3, 4]"

 private:
  std::array<int64_t, kMaxDims> d_{};
  int n_ = 0;
};

// Owned memory on one device; frees through the allocator that made it (or not at all, for borrowed memory).
class Storage {
 public:
  Storage(size_t bytes, Device device, StreamHandle stream = nullptr);
  // Borrowed memory: kept alive by `owner` (may be null), never freed here.
  Storage(void* data, size_t bytes, Device device, std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;  // null for borrowed memory
  StreamHandle stream_ = nullptr;
  std::shared_ptr<void> owner_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu(), StreamHandle stream = nullptr);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor full(const Shape& shape, float value, Device device = Device::cpu());  // f32
  // Copies host data into a new CPU tensor.
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  // Wraps external memory without copying; `owner` keeps it alive.
  static Tensor borrow(void* data, const Shape& shape, DType dtype, Device device, std::shared_ptr<void> owner);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }  // in elements
  int ndim() const { return shape_.ndim(); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  bool is_contiguous() const;

  void* raw_data() const;
  template <class T>
  T* data() const;  // checks that T matches dtype()

  // Same storage, new shape; the tensor must be contiguous and numel must match. One dim may be -1.
  Tensor view(const Shape& shape) const;
  // Rows [start, end) of dimension `dim`; shares storage.
  Tensor slice(int dim, int64_t start, int64_t end) const;
  // A contiguous copy on `device` (shares storage when already there and contiguous).
  Tensor to(Device device) const;
  // f32 <-> bf16 / f16 conversion on the CPU (returns *this if the dtype already matches).
  Tensor to(DType dtype) const;
  Tensor clone() const;
  // Copies src (same shape and dtype, any devices, both contiguous) into this tensor.
  void copy_from(const Tensor& src, StreamHandle stream = nullptr);
  void zero_(StreamHandle stream = nullptr);

  // Reads element i (flat, contiguous) as float: handy in tests and on the CPU. Not for hot loops.
  float item_f32(int64_t i = 0) const;
  std::string describe() const;  // "f32[2, 3] cpu"

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes from storage start
  Shape shape_, strides_;
  DType dtype_ = DType::f32;
};

Shape contiguous_strides(const Shape& shape);

template <class T>
T* Tensor::data() const {
  VLM_CHECK(dtype_of<T>() == dtype_, "tensor is ", dtype_name(dtype_), ", accessed as ", dtype_name(dtype_of<T>()));
  return static_cast<T*>(raw_data());
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  VLM_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "from_vector: ", values.size(),
            " values for shape ", shape.to_string());
  Tensor t = empty(shape, dtype_of<T>());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

}  // namespace vlm
