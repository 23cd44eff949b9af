// Modules in the Caffe style: forward keeps what its backward needs, backward returns the
// gradient with respect to the input and accumulates parameter gradients. No tape: the
// network's structure is the order of the calls, which keeps memory and timing explicit.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace alloy::nn {

// A learnable tensor and its gradient. `value` is the model's copy (half under O2/O3); the
// gradient has the value's dtype and shape and lives in the gradients category.
struct Parameter {
  std::string name;  // fully qualified, e.g. "features.0.weight"
  Tensor value;
  Tensor grad;
  bool is_norm = false;  // belongs to a normalisation layer (keep_batchnorm_fp32)
};

// A non-learnable tensor saved with the model (batch-norm running statistics).
struct Buffer {
  std::string name;
  Tensor value;
};

// Called with each parameter as soon as its gradient for this backward is final, in the
// order they become final (data-parallel bucketing starts its allreduces from here).
using GradReadyHook = std::function<void(Parameter&)>;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& x) = 0;
  virtual Tensor backward(const Tensor& dy) = 0;
  virtual std::string type_name() const = 0;

  // Parameters and buffers of this module and its children, in registration order.
  std::vector<Parameter*> parameters();
  std::vector<Buffer*> buffers();

  void set_training(bool training);
  bool training() const { return training_; }

  // Whether backward must produce the input's gradient (false for a network's first layer).
  void set_needs_input_grad(bool needed) { needs_input_grad_ = needed; }

  // Sets every parameter gradient to zero, allocating gradients on first use.
  void zero_grad();

  // Converts every parameter (and its gradient) to `dtype`, except normalisation parameters
  // and buffers when keep_norm_fp32. Used by the amp layer for O2/O3.
  void cast_parameters(DType dtype, bool keep_norm_fp32);

  // Moves parameters, gradients and buffers to `device`.
  void to_device(Device device);

  void set_grad_ready_hook(GradReadyHook hook);

  // One line per module with its parameter shapes: the model's description in checkpoints.
  std::string describe() const;

 protected:
  Parameter& register_parameter(const std::string& name, Tensor value, bool is_norm = false);
  Buffer& register_buffer(const std::string& name, Tensor value);
  // Children are owned by their parent; the returned reference stays valid.
  template <class M>
  M& register_module(const std::string& name, std::unique_ptr<M> module) {
    M& reference = *module;
    children_.push_back({name, std::move(module)});
    return reference;
  }
  // Tells the hook this module's parameters' gradients are final (end of its backward).
  void notify_grads_ready();
  bool needs_input_grad() const { return needs_input_grad_; }
  const GradReadyHook& grad_ready_hook() const { return hook_; }

 private:
  void collect(const std::string& prefix, std::vector<Parameter*>& params,
               std::vector<Buffer*>& buffers);
  void describe_into(const std::string& prefix, std::string& out) const;

  struct Child {
    std::string name;
    std::unique_ptr<Module> module;
  };
  // Stable addresses: parameters are referenced by optimizers and the amp layer.
  std::vector<std::unique_ptr<Parameter>> parameters_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<Child> children_;
  bool training_ = true;
  bool needs_input_grad_ = true;
  GradReadyHook hook_;
};

}  // namespace alloy::nn
