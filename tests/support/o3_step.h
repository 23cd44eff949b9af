// The LeNet recipe's O3 step (batch 256, SGD lr 0.2, static loss scale 1, fp16 weights updated
// in place) taken op by op, for comparing the CPU with a CUDA device (o3_step_gpu_test) and for
// measuring what round-to-nearest costs the fp16 update (o3_updates_test). Every op's result is
// kept as a host copy: each layer's output, each input and weight gradient, the loss, the
// updated weights. A step may be fed another step's trace: each op then reads the trace's input
// instead of its own previous op's output (and the update the trace's gradients), so that the
// difference of each op is its own arithmetic's, not what it inherited.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "amp/mixed_precision.h"
#include "core/data/dataset.h"
#include "core/nn/sequential.h"
#include "core/tensor.h"

namespace alloy::test {

constexpr std::int64_t kRecipeBatch = 256;
constexpr float kRecipeLr = 0.2f;

// The recipe's LeNet at `level` (with `overrides`: --loss-scale's) on `device`, its weights from
// `seed` as `alloy train` draws them.
struct RecipeModel {
  std::unique_ptr<nn::Module> model;
  std::unique_ptr<amp::MixedPrecision> precision;
  nn::Sequential& net() const { return static_cast<nn::Sequential&>(*model); }
};
RecipeModel make_recipe_lenet(amp::OptLevel level, Device device, std::uint64_t seed = 1,
                              const amp::AmpOverrides& overrides = {});

// Fashion-MNIST's training set from the test data directory; the synthetic set of its shape
// (said on stderr) when it is not installed.
data::Dataset recipe_training_set();

// Rows `indices` of `set`: u8 images and i32 labels on `device`.
struct Batch {
  Tensor images;
  Tensor labels;
};
Batch gather_batch(const data::Dataset& set, const std::vector<std::int64_t>& indices,
                   Device device);
// The recipe's `step`-th batch (0-based) of epoch 0 in the shuffled order of `seed`.
Batch recipe_batch(const data::Dataset& set, std::int64_t step, Device device,
                   std::uint64_t seed = 1);

struct TraceEntry {
  // "3.weight before" (the weights the step starts from), "input", "3 conv2d y", "loss",
  // "dlogits", "3 conv2d dx", "3.weight grad", "3.weight updated"
  std::string name;
  Tensor value;  // a host copy
};

struct StepTrace {
  std::vector<TraceEntry> entries;
  const Tensor& at(const std::string& name) const;  // fails naming `name` when absent
};

// One training step of `model` on `batch`, op by op, as train_step runs it (a ReLU and the 2x2
// average pool after it fused, the first layer without an input gradient), recorded. With
// `feed`, every op's input is feed's recorded one and the update reads feed's gradients.
// update = false stops after backward (the gradients stay in the model until zero_grad).
StepTrace traced_step(RecipeModel& model, const Batch& batch, const StepTrace* feed = nullptr,
                      bool update = true);

// Sets every parameter of `to` (any device, any dtype) to `from`'s values (host or device).
void copy_weights(RecipeModel& to, const RecipeModel& from);

// Two host tensors of one shape and dtype (f32, f16 or bf16): the largest |a - b|, the largest
// distance in units in the last place of the dtype (the number of representable values
// between them; +0 and -0 are one value), and how many elements differ.
struct TensorDiff {
  double max_abs = 0.0;
  std::int64_t max_ulp = 0;
  std::int64_t differing = 0;
  std::int64_t count = 0;
};
TensorDiff diff_tensors(const Tensor& a, const Tensor& b);
// Elements more than `ulps` ulp and more than `atol` apart.
std::int64_t count_apart(const Tensor& a, const Tensor& b, std::int64_t ulps, double atol);

// |half / scale - reference| / |reference| over the whole tensors (L2 norms; host tensors):
// a gradient of a step at loss scale `scale` against the fp32 step's.
double relative_error(const Tensor& half, const Tensor& reference, double scale = 1.0);

// Elements of the half gradient `half` that are zero where the fp32 reference `reference` is
// not (host tensors): gradients lost to underflow at loss scale 1; and how many of those the
// reference's update would have moved (w - lr * reference, rounded to w's fp16, is not w;
// none counted when w is undefined: an activation's gradient).
struct Underflow {
  std::int64_t flushed = 0;
  std::int64_t would_move = 0;
};
Underflow underflow(const Tensor& half, const Tensor& reference, const Tensor& w, float lr);

// SGD's update of the half weight w (host tensors, w f16, g f16 or f32): how many elements
// have a nonzero gradient, and how many of those keep their weight when w - lr * g, computed
// in fp32, is rounded to nearest (|lr * g| under half an ulp of w): updates O3 loses.
struct LostUpdates {
  std::int64_t nonzero = 0;
  std::int64_t lost = 0;
};
LostUpdates lost_updates(const Tensor& w, const Tensor& g, float lr);

}  // namespace alloy::test
