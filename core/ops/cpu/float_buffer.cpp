#include "core/ops/cpu/float_buffer.h"

#include <algorithm>

#include "core/ops/cpu/convert.h"
#include "core/thread_pool.h"

namespace alloy::cpu {

namespace {
constexpr std::int64_t kSerialBelow = 1 << 15;  // small arrays are not worth a fork/join

template <class Body>
void for_range(std::int64_t count, const Body& body) {
  if (count < kSerialBelow) {
    body(0, count);
    return;
  }
  cpu_pool().parallel_for(count,
                          [&](std::int64_t begin, std::int64_t end, int) { body(begin, end); });
}
}  // namespace

void to_float(const void* source, DType dtype, float* target, std::int64_t count) {
  ALLOY_CHECK(is_floating(dtype), "to_float: ", dtype_name(dtype), " is not a float type");
  for_range(count, [&](std::int64_t begin, std::int64_t end) {
    if (dtype == DType::f32) {
      std::copy(static_cast<const float*>(source) + begin, static_cast<const float*>(source) + end,
                target + begin);
    } else {
      widen_16(static_cast<const std::uint16_t*>(source) + begin, dtype, target + begin,
               end - begin);
    }
  });
}

void from_float(const float* source, void* target, DType dtype, std::int64_t count) {
  ALLOY_CHECK(is_floating(dtype), "from_float: ", dtype_name(dtype), " is not a float type");
  for_range(count, [&](std::int64_t begin, std::int64_t end) {
    if (dtype == DType::f32) {
      std::copy(source + begin, source + end, static_cast<float*>(target) + begin);
    } else {
      narrow_16(source + begin, static_cast<std::uint16_t*>(target) + begin, dtype, end - begin);
    }
  });
}

FloatInput::FloatInput(const Tensor& tensor) {
  ALLOY_CHECK(tensor.device().is_cpu(), "CPU kernel given ", tensor.str());
  if (tensor.dtype() == DType::f32) {
    data_ = tensor.data<float>();
    return;
  }
  widened_ = Tensor::empty(tensor.shape(), DType::f32, Device::cpu(), MemoryCategory::workspace);
  to_float(tensor.raw(), tensor.dtype(), widened_.data<float>(), tensor.numel());
  data_ = widened_.data<float>();
}

FloatOutput::FloatOutput(Tensor& tensor, bool accumulate) : target_(tensor) {
  ALLOY_CHECK(tensor.device().is_cpu(), "CPU kernel given ", tensor.str());
  if (tensor.dtype() == DType::f32) {
    data_ = tensor.data<float>();
    return;
  }
  buffer_ = Tensor::empty(tensor.shape(), DType::f32, Device::cpu(), MemoryCategory::workspace);
  data_ = buffer_.data<float>();
  if (accumulate) to_float(tensor.raw(), tensor.dtype(), data_, tensor.numel());
}

void FloatOutput::commit() {
  if (buffer_.defined()) from_float(data_, target_.raw(), target_.dtype(), target_.numel());
}

}  // namespace alloy::cpu
