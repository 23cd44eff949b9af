// Tensor: a contiguous, row-major view of shared device storage with a shape and a dtype.
// Copies of a Tensor share storage; clone() makes a deep copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/memory.h"

namespace alloy {

using Shape = std::vector<std::int64_t>;

std::string shape_str(const Shape& shape);
std::int64_t shape_numel(const Shape& shape);

// Owns one allocation and returns it to its allocator.
class Storage {
 public:
  Storage(std::size_t bytes, Device device, MemoryCategory category);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  MemoryCategory category() const { return category_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_;
  MemoryCategory category_;
};

template <class T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<std::uint8_t> {
  static constexpr DType value = DType::u8;
};
template <>
struct DTypeOf<std::int32_t> {
  static constexpr DType value = DType::i32;
};

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised contents.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu(),
                      MemoryCategory category = MemoryCategory::activations);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu(),
                      MemoryCategory category = MemoryCategory::activations);
  // A tensor on `device` holding a copy of the nbytes(shape, dtype) bytes at `bytes` (a host
  // struct kept on a device as raw elements, e.g. a step tally); an upload when not on the CPU.
  static Tensor from_bytes(const Shape& shape, DType dtype, const void* bytes, Device device,
                           MemoryCategory category);
  // A host f32 tensor holding `values` (tests and small constants).
  static Tensor from_floats(const Shape& shape, const std::vector<float>& values,
                            DType dtype = DType::f32,
                            MemoryCategory category = MemoryCategory::activations);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  std::int64_t dim(int axis) const;
  int ndim() const { return static_cast<int>(shape_.size()); }
  std::int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  Device device() const;
  MemoryCategory category() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }

  void* raw() const;
  // Typed pointer; checks that T matches the dtype (16-bit types use std::uint16_t).
  template <class T>
  T* data() const {
    check_element_type(sizeof(T), DTypeOf<T>::value);
    return static_cast<T*>(raw());
  }
  std::uint16_t* half_data() const;  // f16 or bf16 bit patterns

  // Same storage, new shape with the same element count.
  Tensor reshape(const Shape& shape) const;
  // Part of this tensor's memory seen as `shape` elements of `dtype`, from byte `offset` of its
  // contents: one allocation whose parts different ops read and write, and which the host
  // copies in one go (the loss scaler's state, amp/loss_scaler.h). `offset` must be a multiple
  // of the dtype's size, and the view must lie within this tensor.
  Tensor view(std::size_t offset, const Shape& shape, DType dtype) const;
  // Deep copy, optionally into another category.
  Tensor clone() const;
  Tensor clone(MemoryCategory category) const;

  // The contents as host floats, for tests, logging and small reductions; on any device.
  // Each call is one download (core/round_trips.h), on the CPU too.
  std::vector<float> to_floats() const;
  // The raw contents (nbytes() bytes) into host memory; one download, on any device.
  void download_to(void* destination) const;
  // Host tensors only.
  void copy_from_floats(const std::vector<float>& values);
  // Device work on every backend (core/ops/fill.h): no host buffer, no upload, no wait.
  void fill(float value);
  // Same shape and dtype; any devices. A copy between the host and a device is an upload or a
  // download (cuda_copy_bytes counts it); one between host tensors is not.
  void copy_from(const Tensor& source);

  std::string str() const;  // "f16[256, 1, 28, 28] on cpu"

 private:
  void check_element_type(std::size_t size, DType expected) const;
  std::vector<float> host_floats() const;  // to_floats() of a host tensor, uncounted

  std::shared_ptr<Storage> storage_;
  std::size_t offset_ = 0;  // bytes into the storage where this tensor's contents start
  Shape shape_;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::f32;
};

template <>
inline float* Tensor::data<float>() const {
  check_element_type(sizeof(float), DType::f32);
  return static_cast<float*>(raw());
}

}  // namespace alloy
