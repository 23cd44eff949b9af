#include "core/nn/module.h"

#include "core/ops/elementwise.h"

namespace alloy::nn {

namespace {

// `tensor` in `dtype` and `category`, converting only when the dtype differs.
Tensor converted(const Tensor& tensor, DType dtype, MemoryCategory category) {
  return tensor.dtype() == dtype ? tensor : cast(tensor, dtype, category);
}

Tensor moved(const Tensor& tensor, Device device) {
  if (!tensor.defined() || tensor.device() == device) return tensor;
  Tensor copy = Tensor::empty(tensor.shape(), tensor.dtype(), device, tensor.category());
  copy.copy_from(tensor);
  return copy;
}

}  // namespace

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> params;
  std::vector<Buffer*> buffers;
  collect(params, buffers);
  return params;
}

std::vector<Buffer*> Module::buffers() {
  std::vector<Parameter*> params;
  std::vector<Buffer*> buffers;
  collect(params, buffers);
  return buffers;
}

void Module::collect(std::vector<Parameter*>& params, std::vector<Buffer*>& buffers) {
  for (auto& parameter : parameters_)
    params.push_back(parameter.get());
  for (auto& buffer : buffers_)
    buffers.push_back(buffer.get());
  for (auto& child : children_)
    child.module->collect(params, buffers);
}

void Module::add_name_prefix(const std::string& prefix) {
  for (auto& parameter : parameters_)
    parameter->name.insert(0, prefix);
  for (auto& buffer : buffers_)
    buffer->name.insert(0, prefix);
  for (auto& child : children_)
    child.module->add_name_prefix(prefix);
}

void Module::set_training(bool training) {
  training_ = training;
  for (auto& child : children_)
    child.module->set_training(training);
}

void Module::set_forward_mode(ForwardMode mode) {
  forward_mode_ = mode;
  for (auto& child : children_)
    child.module->set_forward_mode(mode);
}

void Module::set_layout(Layout layout) {
  layout_ = layout;
  for (auto& child : children_)
    child.module->set_layout(layout);
}

bool Module::has_layout_region() const {
  if (enters_layout()) return true;
  for (const auto& child : children_) {
    if (child.module->has_layout_region()) return true;
  }
  return false;
}

int Module::recompute_blocks(bool recompute) {
  int blocks = 0;
  for (auto& child : children_)
    blocks += child.module->recompute_blocks(recompute);
  return blocks;
}

Tensor& Module::grad_of(Parameter& parameter) {
  const Tensor& value = parameter.value;
  Tensor& grad = parameter.grad;
  if (!grad.defined() || grad.dtype() != value.dtype() || grad.shape() != value.shape() ||
      grad.device() != value.device()) {
    grad = Tensor::zeros(value.shape(), value.dtype(), value.device(), MemoryCategory::gradients);
  }
  return grad;
}

void Module::zero_grad() {
  // Walks the tree in place (parameters() would build a vector): every step calls this, and
  // it allocates nothing once the gradients exist.
  for (auto& parameter : parameters_) {
    const bool fresh = !parameter->grad.defined();
    Tensor& grad = grad_of(*parameter);
    if (!fresh) grad.fill(0.0f);  // device work: a memset on CUDA
  }
  for (auto& child : children_)
    child.module->zero_grad();
}

void Module::cast_parameters(DType dtype, bool keep_norm_fp32) {
  ALLOY_CHECK(is_floating(dtype), "cast_parameters: ", dtype_name(dtype),
              " is not a floating dtype");
  std::vector<Parameter*> params;
  std::vector<Buffer*> buffers;
  collect(params, buffers);
  for (Parameter* parameter : params) {
    const DType target = parameter->is_norm && keep_norm_fp32 ? DType::f32 : dtype;
    parameter->value = converted(parameter->value, target, MemoryCategory::parameters);
    if (parameter->grad.defined()) {
      parameter->grad = converted(parameter->grad, target, MemoryCategory::gradients);
    }
  }
  // Every buffer is a normalisation layer's running statistic.
  const DType buffer_dtype = keep_norm_fp32 ? DType::f32 : dtype;
  for (Buffer* buffer : buffers) {
    if (is_floating(buffer->value.dtype())) {
      buffer->value = converted(buffer->value, buffer_dtype, MemoryCategory::parameters);
    }
  }
}

void Module::to_device(Device device) {
  std::vector<Parameter*> params;
  std::vector<Buffer*> buffers;
  collect(params, buffers);
  for (Parameter* parameter : params) {
    parameter->value = moved(parameter->value, device);
    parameter->grad = moved(parameter->grad, device);
  }
  for (Buffer* buffer : buffers)
    buffer->value = moved(buffer->value, device);
}

void Module::set_grad_ready_hook(GradReadyHook hook) {
  for (auto& child : children_)
    child.module->set_grad_ready_hook(hook);
  hook_ = std::move(hook);
}

void Module::notify_grads_ready() {
  if (!hook_) return;
  for (auto it = parameters_.rbegin(); it != parameters_.rend(); ++it)
    hook_(**it);
}

std::string Module::describe() const {
  std::string out;
  describe_into("", out);
  return out;
}

void Module::describe_into(const std::string& path, std::string& out) const {
  if (!path.empty()) out += path + " ";
  out += type_name() + "(" + options() + ")";
  for (const auto& parameter : parameters_) {
    // The local name: the qualified one less this module's path.
    const std::string& name = parameter->name;
    out += " " + name.substr(name.rfind('.') + 1) + "=" + shape_str(parameter->value.shape());
  }
  out += "\n";
  for (const auto& child : children_) {
    child.module->describe_into(path.empty() ? child.name : path + "." + child.name, out);
  }
}

Parameter& Module::register_parameter(const std::string& name, Tensor value, bool is_norm) {
  ALLOY_CHECK(value.category() == MemoryCategory::parameters, type_name(), ": parameter '", name,
              "' must be allocated as parameters, got ", memory_category_name(value.category()));
  auto parameter = std::make_unique<Parameter>();
  parameter->name = name;
  parameter->value = std::move(value);
  parameter->is_norm = is_norm;
  parameters_.push_back(std::move(parameter));
  return *parameters_.back();
}

Buffer& Module::register_buffer(const std::string& name, Tensor value) {
  ALLOY_CHECK(value.category() == MemoryCategory::parameters, type_name(), ": buffer '", name,
              "' must be allocated as parameters, got ", memory_category_name(value.category()));
  auto buffer = std::make_unique<Buffer>();
  buffer->name = name;
  buffer->value = std::move(value);
  buffers_.push_back(std::move(buffer));
  return *buffers_.back();
}

}  // namespace alloy::nn
