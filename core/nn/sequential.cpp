#include "core/nn/sequential.h"

namespace alloy::nn {

Module& Sequential::add(std::unique_ptr<Module> module) {
  return add(std::to_string(modules_.size()), std::move(module));
}

Module& Sequential::add(const std::string& name, std::unique_ptr<Module> module) {
  ALLOY_CHECK(module != nullptr, "Sequential: child '", name, "' is null");
  Module& child = register_module(name, std::move(module));
  modules_.push_back(&child);
  return child;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (Module* module : modules_)
    y = module->forward(y);
  return y;
}

Tensor Sequential::backward(const Tensor& dy) {
  if (modules_.empty()) return needs_input_grad() ? dy : Tensor();
  modules_.front()->set_needs_input_grad(needs_input_grad());
  Tensor dx = dy;
  for (auto it = modules_.rbegin(); it != modules_.rend(); ++it)
    dx = (*it)->backward(dx);
  return dx;
}

}  // namespace alloy::nn
