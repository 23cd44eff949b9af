#include "core/ops/elementwise.h"

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/elementwise.h"
#endif

namespace alloy {

Tensor cast(const Tensor& x, DType dtype, MemoryCategory category) {
  constexpr const char* op = "cast";
  const Device device = check_elementwise(op, {{"x", x}});
  ALLOY_CHECK(is_floating(dtype), op, ": target dtype must be f32, f16 or bf16, got ",
              dtype_name(dtype));
  Tensor y = Tensor::empty(x.shape(), dtype, device, category);
  cast_into(x, y);
  return y;
}

void cast_into(const Tensor& x, Tensor& out) {
  constexpr const char* op = "cast_into";
  const Device device = check_elementwise(op, {{"x", x}, {"out", out}});
  if (x.dtype() == out.dtype()) {
    out.copy_from(x);
    return;
  }
  ALLOY_RUN_KERNEL(op, device, cast, x.raw(), x.dtype(), out.raw(), out.dtype(), x.numel());
}

Tensor add(const Tensor& a, const Tensor& b) {
  constexpr const char* op = "add";
  const Device device = check_elementwise(op, {{"a", a}, {"b", b}});
  Tensor y = Tensor::empty(a.shape(), a.dtype(), device, MemoryCategory::activations);
  ALLOY_RUN_KERNEL(op, device, add, a.raw(), a.dtype(), b.raw(), b.dtype(), y.raw(), a.numel());
  return y;
}

void axpby(float alpha, const Tensor& x, float beta, Tensor& y) {
  constexpr const char* op = "axpby";
  const Device device = check_elementwise(op, {{"x", x}, {"y", y}});
  ALLOY_RUN_KERNEL(op, device, axpby, alpha, x.raw(), x.dtype(), beta, y.raw(), y.dtype(),
                   x.numel());
}

void scale(Tensor& x, float alpha) {
  constexpr const char* op = "scale";
  const Device device = check_elementwise(op, {{"x", x}});
  ALLOY_RUN_KERNEL(op, device, scale, x.raw(), x.dtype(), alpha, x.numel());
}

Tensor normalize_images(const Tensor& images, DType dtype) {
  constexpr const char* op = "normalize_images";
  const Device device = common_device(op, {&images});
  check_dtype(op, "images", images, DType::u8);
  ALLOY_CHECK(is_floating(dtype), op, ": target dtype must be f32, f16 or bf16, got ",
              dtype_name(dtype));
  Tensor y = Tensor::empty(images.shape(), dtype, device, MemoryCategory::activations);
  ALLOY_RUN_KERNEL(op, device, normalize_images, images.data<std::uint8_t>(), y.raw(), dtype,
                   images.numel());
  return y;
}

Tensor flatten(const Tensor& x) {
  ALLOY_CHECK(x.defined(), "flatten: x is an undefined tensor");
  ALLOY_CHECK(x.ndim() >= 2, "flatten: x must have at least 2 dimensions, got ", x.str());
  std::int64_t rest = 1;
  for (int axis = 1; axis < x.ndim(); ++axis)
    rest *= x.dim(axis);
  return x.reshape({x.dim(0), rest});
}

}  // namespace alloy
