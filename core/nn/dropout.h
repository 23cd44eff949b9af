// Dropout (PyTorch's nn.Dropout(p)): in training, each element is zeroed with probability p and
// the others scaled by 1 / (1 - p); in evaluation, and for p = 0, forward returns its input
// itself (no copy) and backward its gradient. Follows its input's dtype (O1 class follow_input).
//
// Masks come from core/ops/dropout.h: a function of the layer's key, the optimizer's step
// count, the example's row in the global batch and the column, so they do not change with how a
// batch is split (gradient accumulation, data parallelism) and are never stored: backward and a
// recomputed forward draw them again. The key is drawn from the model's Generator when the
// layer is built, so the seed decides it and a model rebuilt from the same seed has the same.
//
// The step count and the rows come from the DropoutStream in scope: app::train_step sets it for
// each micro-batch; a loop of your own wraps each micro-batch's forward AND backward in a
// DropoutStreamScope (a recomputed block runs its forward again inside backward). A training
// forward with p > 0 outside any scope is an Error.
#pragma once

#include <cstdint>

#include "core/nn/module.h"
#include "core/ops/dropout.h"
#include "core/random.h"

namespace alloy::nn {

// Where a micro-batch's dropout masks come from.
struct DropoutStream {
  // The optimizer's applied-step count (optim::Optimizer::step_count(): i32 [2] on the model's
  // device), read by the kernels when they run.
  const Tensor* step_count = nullptr;
  // Global batch row of the micro-batch's row i: row_start + row_stride * i. A data-parallel
  // rank r of W whose micro-batch starts at its local row f: r + W * f and W; one process: f, 1.
  std::int64_t row_start = 0;
  std::int64_t row_stride = 1;
};

// Makes `stream` the one Dropout forwards on this thread draw from while the scope lives;
// scopes nest (the previous one returns at destruction). The step count tensor must outlive it.
class DropoutStreamScope {
 public:
  explicit DropoutStreamScope(const DropoutStream& stream);
  ~DropoutStreamScope();
  DropoutStreamScope(const DropoutStreamScope&) = delete;
  DropoutStreamScope& operator=(const DropoutStreamScope&) = delete;

 private:
  DropoutStream stream_;
  const DropoutStream* previous_;
};

// The stream in scope on this thread, or null.
const DropoutStream* active_dropout_stream();

class Dropout : public Module {
 public:
  // UsageError unless 0 <= p < 1. Draws the layer's key from `generator` (one next_u64).
  Dropout(float p, Generator& generator);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "Dropout"; }
  std::string options() const override;

  float p() const { return p_; }
  std::uint64_t key() const { return key_; }

 private:
  float p_;
  std::uint64_t key_;
  // From a training forward to its backward: the mask it drew and the step count it read
  // (the count cannot change in between: only the optimizer's update advances it).
  DropoutMask mask_;
  Tensor step_;
};

}  // namespace alloy::nn
