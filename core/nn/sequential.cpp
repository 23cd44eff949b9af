#include "core/nn/sequential.h"

#include <algorithm>

#include "core/nn/pool2d.h"
#include "core/nn/relu.h"
#include "core/ops/pool2d.h"

namespace alloy::nn {

Module& Sequential::add(std::unique_ptr<Module> module) {
  return add(std::to_string(modules_.size()), std::move(module));
}

Module& Sequential::add(const std::string& name, std::unique_ptr<Module> module) {
  ALLOY_CHECK(module != nullptr, "Sequential: child '", name, "' is null");
  Module& child = register_module(name, std::move(module));
  modules_.push_back(&child);
  recompute_.push_back(false);
  recompute_inputs_.emplace_back();
  fused_with_next_.push_back(false);
  return child;
}

void Sequential::set_recompute(std::size_t index, bool recompute) {
  ALLOY_CHECK(index < modules_.size(), "Sequential: no child ", index, " to recompute (",
              modules_.size(), " children)");
  recompute_[index] = recompute;
}

int Sequential::recompute_blocks(bool recompute) {
  int blocks = 0;
  for (std::size_t i = 0; i < modules_.size(); ++i) {
    if (modules_[i]->is_block()) {
      set_recompute(i, recompute);
      ++blocks;
    } else {
      blocks += modules_[i]->recompute_blocks(recompute);
    }
  }
  return blocks;
}

Tensor Sequential::forward_child(std::size_t index, const Tensor& x, ForwardMode mode) {
  Module& child = *modules_[index];
  struct Restore {
    Module& child;
    ForwardMode mode;
    ~Restore() { child.set_forward_mode(mode); }
  } restore{child, forward_mode()};
  child.set_forward_mode(mode);
  return child.forward(x);
}

bool Sequential::fuses_with_next(std::size_t index) const {
  if (index + 1 >= modules_.size() || recompute_[index] || recompute_[index + 1]) return false;
  const auto* pool = dynamic_cast<const AvgPool2d*>(modules_[index + 1]);
  return pool != nullptr && dynamic_cast<const ReLU*>(modules_[index]) != nullptr &&
         relu_avg_pool2d_fuses(pool->params(), pool->layout());
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  std::fill(fused_with_next_.begin(), fused_with_next_.end(), false);
  for (std::size_t i = 0; i < modules_.size(); ++i) {
    if (fuses_with_next(i)) {
      recompute_inputs_[i] = recompute_inputs_[i + 1] = Tensor();
      y = static_cast<ReLU*>(modules_[i])
              ->forward_with_pool(*static_cast<const AvgPool2d*>(modules_[i + 1]), y);
      fused_with_next_[i] = true;
      ++i;
      continue;
    }
    if (recompute_[i] && keeps_activations()) {
      recompute_inputs_[i] = y;
      ForwardMode discard = forward_mode();
      discard.keep_activations = false;
      y = forward_child(i, y, discard);
    } else {
      recompute_inputs_[i] = Tensor();
      y = modules_[i]->forward(y);
    }
  }
  return y;
}

Tensor Sequential::backward(const Tensor& dy) {
  if (modules_.empty()) return needs_input_grad() ? dy : Tensor();
  std::size_t first = 0;  // the first child that computes anything
  while (first + 1 < modules_.size() && modules_[first]->only_reorders())
    ++first;
  for (std::size_t i = 0; i <= first; ++i)
    modules_[i]->set_needs_input_grad(needs_input_grad());
  Tensor dx = dy;
  for (std::size_t i = modules_.size(); i-- > 0;) {
    if (i > 0 && fused_with_next_[i - 1]) {
      dx = static_cast<ReLU*>(modules_[i - 1])
               ->backward_with_pool(*static_cast<const AvgPool2d*>(modules_[i]), dx);
      fused_with_next_[i - 1] = false;
      --i;
      continue;
    }
    if (recompute_inputs_[i].defined()) {
      const Tensor input = std::move(recompute_inputs_[i]);
      recompute_inputs_[i] = Tensor();
      // The output is dropped: the child keeps what its backward needs.
      forward_child(i, input,
                    ForwardMode{/*keep_activations=*/true,
                                /*update_running_statistics=*/false});
    }
    dx = modules_[i]->backward(dx);
  }
  return dx;
}

}  // namespace alloy::nn
