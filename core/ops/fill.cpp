#include "core/ops/fill.h"

#include <cstring>

#include "core/half.h"
#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/fill.h"
#endif

namespace alloy {

namespace {

// Integer dtypes truncate toward zero; a value whose truncation falls outside [low, high]
// (or NaN) has no integer to become.
void check_integer_range(float value, double low, double high, DType dtype) {
  const double wide = value;
  ALLOY_CHECK(wide > low - 1.0 && wide < high + 1.0, "fill of a ", dtype_name(dtype),
              " tensor with ", value, ": outside [", low, ", ", high, "]");
}

}  // namespace

std::uint32_t fill_pattern(float value, DType dtype) {
  switch (dtype) {
    case DType::f32: {
      std::uint32_t bits = 0;
      std::memcpy(&bits, &value, sizeof bits);
      return bits;
    }
    case DType::f16:
      return float_to_half_bits(value);
    case DType::bf16:
      return float_to_bf16_bits(value);
    case DType::u8:
      check_integer_range(value, 0.0, 255.0, dtype);
      return static_cast<std::uint8_t>(value);
    case DType::i32:
      check_integer_range(value, -2147483648.0, 2147483647.0, dtype);
      return static_cast<std::uint32_t>(static_cast<std::int32_t>(value));
  }
  fail("fill: unknown dtype");
}

void fill(Tensor& tensor, float value) {
  constexpr const char* op = "fill";
  const Device device = common_device(op, {&tensor});
  const std::uint32_t pattern = fill_pattern(value, tensor.dtype());
  const std::size_t element_size = dtype_size(tensor.dtype());
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::fill(tensor.raw(), element_size, pattern, tensor.numel(), cuda::stream_of(device));
      return;
    });
  cpu::fill(tensor.raw(), element_size, pattern, tensor.numel());
}

}  // namespace alloy
