// A chain of modules: forward runs them in order, backward in reverse. Children are named
// "0", "1", ... by position unless given a name.
//
// Activation recomputation: a child marked with set_recompute keeps nothing in its training
// forward; only its input is kept, and backward runs its forward again on that input (keeping
// what its backward needs, without updating batch norm's running statistics a second time)
// just before its backward. Kernels are deterministic, so the gradients and the running
// statistics are the same bits as without it; the cost is the child's forward once more.
//
// Fusion: a ReLU followed by an average pool that core/ops/pool2d.h's relu_avg_pool2d fuses
// (2x2 windows, stride 2, NCHW; LeNet's), neither recomputed, runs as one pass each way
// (nn::ReLU::forward_with_pool): the same bits, without the ReLU's output in memory.
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
  // The first child computes its input's gradient only if this module must, and so does the
  // child after a leading run of children that only reorder it (Module::only_reorders).
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "Sequential"; }

  std::size_t size() const { return modules_.size(); }
  Module& operator[](std::size_t index) { return *modules_.at(index); }

  void set_recompute(std::size_t index, bool recompute);
  bool recomputes(std::size_t index) const { return recompute_.at(index); }
  // Marks the children that are blocks; looks for more inside the others.
  int recompute_blocks(bool recompute) override;

 private:
  // Runs child `index`'s forward in a mode of its own, restoring this module's after.
  Tensor forward_child(std::size_t index, const Tensor& x, ForwardMode mode);
  // Whether child `index` and the next run fused (a ReLU and an average pool).
  bool fuses_with_next(std::size_t index) const;

  std::vector<Module*> modules_;  // owned through register_module
  std::vector<bool> recompute_;
  // Until backward: the input of each recomputed child (undefined for the others).
  std::vector<Tensor> recompute_inputs_;
  // Until backward: whether the last forward ran child i with child i + 1 fused.
  std::vector<bool> fused_with_next_;
};

}  // namespace alloy::nn
