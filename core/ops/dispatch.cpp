#include "core/ops/dispatch.h"

#include <iterator>

namespace alloy {

namespace {

// common_device over `arguments`, each of which tensor_of maps to a const Tensor*.
template <class Arguments, class TensorOf>
Device common_device_of(const char* op, const Arguments& arguments, const TensorOf& tensor_of) {
  const Tensor* first = nullptr;
  for (const auto& argument : arguments) {
    const Tensor* tensor = tensor_of(argument);
    if (tensor == nullptr || !tensor->defined()) continue;
    if (first == nullptr) {
      first = tensor;
    } else if (tensor->device() != first->device()) {
      fail(op, ": tensors on different devices (", first->str(), " and ", tensor->str(), ")");
    }
  }
  ALLOY_CHECK(first != nullptr, op, ": called with no defined tensor");
  return first->device();
}

}  // namespace

Device common_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  return common_device_of(op, tensors, [](const Tensor* tensor) { return tensor; });
}

void check_dtype(const char* op, const char* what, const Tensor& tensor, DType dtype) {
  ALLOY_CHECK(tensor.dtype() == dtype, op, ": ", what, " must be ", dtype_name(dtype), ", got ",
              tensor.str());
}

void check_accumulator_dtype(const char* op, const char* what, const Tensor& tensor,
                             DType compute) {
  ALLOY_CHECK(tensor.dtype() == compute || tensor.dtype() == DType::f32, op, ": ", what,
              " must be ", dtype_name(compute), " or f32, got ", tensor.str());
}

void check_floating(const char* op, const char* what, const Tensor& tensor) {
  ALLOY_CHECK(is_floating(tensor.dtype()), op, ": ", what, " must be f32, f16 or bf16, got ",
              tensor.str());
}

void check_rank(const char* op, const char* what, const Tensor& tensor, int rank) {
  ALLOY_CHECK(tensor.ndim() == rank, op, ": ", what, " must have ", rank, " dimensions, got ",
              tensor.str());
}

void check_shape(const char* op, const char* what, const Tensor& tensor, const Shape& shape) {
  ALLOY_CHECK(tensor.shape() == shape, op, ": ", what, " must have shape ", shape_str(shape),
              ", got ", tensor.str());
}

Device check_elementwise(const char* op, std::initializer_list<NamedTensor> tensors) {
  const Device device =
      common_device_of(op, tensors, [](const NamedTensor& named) { return &named.tensor; });
  for (const NamedTensor& named : tensors)
    check_floating(op, named.name, named.tensor);
  const Shape& shape = tensors.begin()->tensor.shape();
  for (auto named = std::next(tensors.begin()); named != tensors.end(); ++named)
    check_shape(op, named->name, named->tensor, shape);
  return device;
}

void no_kernel(const char* op, Device device) {
  fail(op, ": no kernel for ", device.str(), " in this build");
}

}  // namespace alloy
