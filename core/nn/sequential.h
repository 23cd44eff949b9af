// A chain of modules: forward runs them in order, backward in reverse. Children are named
// "0", "1", ... by position unless given a name.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/nn/module.h"

namespace alloy::nn {

class Sequential : public Module {
 public:
  Module& add(std::unique_ptr<Module> module);
  Module& add(const std::string& name, std::unique_ptr<Module> module);

  template <class M, class... Args>
  M& emplace(Args&&... args) {
    auto module = std::make_unique<M>(std::forward<Args>(args)...);
    M& reference = *module;
    add(std::move(module));
    return reference;
  }

  Tensor forward(const Tensor& x) override;
  // The first child computes its input's gradient only if this module must.
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "Sequential"; }

  std::size_t size() const { return modules_.size(); }
  Module& operator[](std::size_t index) { return *modules_.at(index); }

 private:
  std::vector<Module*> modules_;  // owned through register_module
};

}  // namespace alloy::nn
