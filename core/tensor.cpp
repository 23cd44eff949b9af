#include "core/tensor.h"

#include <cstring>
#include <sstream>

#include "core/backend.h"
#include "core/half.h"
#include "core/ops/fill.h"
#include "core/round_trips.h"

namespace alloy {

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < shape.size(); ++i)
    out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t count = 1;
  for (const auto extent : shape) {
    ALLOY_CHECK(extent >= 0, "negative extent in shape ", shape_str(shape));
    count *= extent;
  }
  return count;
}

std::string Device::str() const {
  return is_cpu() ? "cpu" : "cuda:" + std::to_string(index);
}

Storage::Storage(std::size_t bytes, Device device, MemoryCategory category)
    : bytes_(bytes), device_(device), category_(category) {
  data_ = allocator_for(device).allocate(bytes, category);
}

Storage::~Storage() {
  allocator_for(device_).deallocate(data_, bytes_, category_);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, MemoryCategory category) {
  Tensor tensor;
  tensor.shape_ = shape;
  tensor.numel_ = shape_numel(shape);
  tensor.dtype_ = dtype;
  tensor.storage_ = std::make_shared<Storage>(tensor.nbytes(), device, category);
  return tensor;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device, MemoryCategory category) {
  Tensor tensor = empty(shape, dtype, device, category);
  tensor.fill(0.0f);
  return tensor;
}

Tensor Tensor::from_floats(const Shape& shape, const std::vector<float>& values, DType dtype,
                           MemoryCategory category) {
  Tensor tensor = empty(shape, dtype, Device::cpu(), category);
  tensor.copy_from_floats(values);
  return tensor;
}

Tensor Tensor::from_bytes(const Shape& shape, DType dtype, const void* bytes, Device device,
                          MemoryCategory category) {
  Tensor host = empty(shape, dtype, Device::cpu(), category);
  std::memcpy(host.raw(), bytes, host.nbytes());
  if (device.is_cpu()) return host;
  Tensor placed = empty(shape, dtype, device, category);
  placed.copy_from(host);
  return placed;
}

std::int64_t Tensor::dim(int axis) const {
  const int rank = ndim();
  const int index = axis < 0 ? axis + rank : axis;
  ALLOY_CHECK(index >= 0 && index < rank, "axis ", axis, " out of range for shape ",
              shape_str(shape_));
  return shape_[static_cast<std::size_t>(index)];
}

Device Tensor::device() const {
  ALLOY_CHECK(defined(), "device() of an undefined tensor");
  return storage_->device();
}

MemoryCategory Tensor::category() const {
  ALLOY_CHECK(defined(), "category() of an undefined tensor");
  return storage_->category();
}

void* Tensor::raw() const {
  ALLOY_CHECK(defined(), "data access to an undefined tensor");
  return static_cast<unsigned char*>(storage_->data()) + offset_;
}

void Tensor::check_element_type(std::size_t size, DType expected) const {
  ALLOY_CHECK(dtype_size(dtype_) == size && (is_half(dtype_) || dtype_ == expected), "tensor ",
              str(), " accessed as a ", dtype_name(expected), " array");
}

std::uint16_t* Tensor::half_data() const {
  ALLOY_CHECK(is_half(dtype_), "tensor ", str(), " accessed as 16-bit floats");
  return static_cast<std::uint16_t*>(raw());
}

Tensor Tensor::reshape(const Shape& shape) const {
  ALLOY_CHECK(shape_numel(shape) == numel_, "cannot reshape ", str(), " to ", shape_str(shape));
  Tensor view = *this;
  view.shape_ = shape;
  return view;
}

Tensor Tensor::view(std::size_t offset, const Shape& shape, DType dtype) const {
  ALLOY_CHECK(defined(), "view of an undefined tensor");
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  ALLOY_CHECK(offset % dtype_size(dtype) == 0, "cannot view ", str(), " as ", dtype_name(dtype),
              shape_str(shape), " from byte ", offset, ": not a multiple of ", dtype_size(dtype));
  ALLOY_CHECK(offset <= nbytes() && bytes <= nbytes() - offset, "cannot view ", str(), " as ",
              dtype_name(dtype), shape_str(shape), " from byte ", offset, ": past its ", nbytes(),
              " bytes");
  Tensor view = *this;
  view.offset_ = offset_ + offset;
  view.shape_ = shape;
  view.numel_ = shape_numel(shape);
  view.dtype_ = dtype;
  return view;
}

Tensor Tensor::clone() const {
  return clone(category());
}

Tensor Tensor::clone(MemoryCategory category) const {
  Tensor copy = empty(shape_, dtype_, device(), category);
  copy.copy_from(*this);
  return copy;
}

std::vector<float> Tensor::to_floats() const {
  if (!device().is_cpu()) {
    Tensor host = empty(shape_, dtype_, Device::cpu(), MemoryCategory::workspace);
    host.copy_from(*this);  // the download, counted by the copy
    return host.host_floats();
  }
  // The device is the host: the read in place is this backend's download.
  count_download();
  count_host_wait();
  return host_floats();
}

void Tensor::download_to(void* destination) const {
  if (device().is_cpu()) {
    count_download();
    count_host_wait();
    std::memcpy(destination, raw(), nbytes());
    return;
  }
  cuda_copy_bytes(destination, Device::cpu(), raw(), device(), nbytes());
}

std::vector<float> Tensor::host_floats() const {
  std::vector<float> values(static_cast<std::size_t>(numel_));
  const void* source = raw();
  for (std::size_t i = 0; i < values.size(); ++i) {
    switch (dtype_) {
      case DType::f32:
        values[i] = static_cast<const float*>(source)[i];
        break;
      case DType::f16:
        values[i] = half_bits_to_float(static_cast<const std::uint16_t*>(source)[i]);
        break;
      case DType::bf16:
        values[i] = bf16_bits_to_float(static_cast<const std::uint16_t*>(source)[i]);
        break;
      case DType::u8:
        values[i] = static_cast<const std::uint8_t*>(source)[i];
        break;
      case DType::i32:
        values[i] = static_cast<float>(static_cast<const std::int32_t*>(source)[i]);
        break;
    }
  }
  return values;
}

namespace {

// Integer dtypes truncate toward zero; a value whose truncation falls outside [low, high]
// (or NaN) has no integer to become, and converting it would be undefined behaviour.
void check_integer_range(float value, std::size_t index, double low, double high,
                         const Tensor& target) {
  const double wide = value;
  ALLOY_CHECK(wide > low - 1.0 && wide < high + 1.0, "copy of value ", value, " (element ", index,
              ") into ", target.str(), ": outside [", low, ", ", high, "]");
}

}  // namespace

void Tensor::copy_from_floats(const std::vector<float>& values) {
  ALLOY_CHECK(device().is_cpu(), "copy_from_floats() needs a host tensor, got ", str());
  ALLOY_CHECK(static_cast<std::int64_t>(values.size()) == numel_, "copy of ", values.size(),
              " values into ", str());
  void* target = raw();
  for (std::size_t i = 0; i < values.size(); ++i) {
    switch (dtype_) {
      case DType::f32:
        static_cast<float*>(target)[i] = values[i];
        break;
      case DType::f16:
        static_cast<std::uint16_t*>(target)[i] = float_to_half_bits(values[i]);
        break;
      case DType::bf16:
        static_cast<std::uint16_t*>(target)[i] = float_to_bf16_bits(values[i]);
        break;
      case DType::u8:
        check_integer_range(values[i], i, 0.0, 255.0, *this);
        static_cast<std::uint8_t*>(target)[i] = static_cast<std::uint8_t>(values[i]);
        break;
      case DType::i32:
        check_integer_range(values[i], i, -2147483648.0, 2147483647.0, *this);
        static_cast<std::int32_t*>(target)[i] = static_cast<std::int32_t>(values[i]);
        break;
    }
  }
}

void Tensor::fill(float value) {
  alloy::fill(*this, value);
}

void Tensor::copy_from(const Tensor& source) {
  ALLOY_CHECK(source.shape_ == shape_ && source.dtype_ == dtype_, "copy from ", source.str(),
              " into ", str());
  if (device().is_cpu() && source.device().is_cpu()) {
    std::memcpy(raw(), source.raw(), nbytes());
    return;
  }
  cuda_copy_bytes(raw(), device(), source.raw(), source.device(), nbytes());
}

std::string Tensor::str() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + " on " + device().str();
}

DType parse_dtype(const std::string& text) {
  if (text == "f32" || text == "fp32" || text == "float32") return DType::f32;
  if (text == "f16" || text == "fp16" || text == "float16") return DType::f16;
  if (text == "bf16" || text == "bfloat16") return DType::bf16;
  usage_fail("unknown dtype '", text, "' (expected fp32, fp16 or bf16)");
}

}  // namespace alloy
