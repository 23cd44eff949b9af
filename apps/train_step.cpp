#include "apps/train_step.h"

#include "apps/data_parallel.h"
#include "core/nn/cast_policy.h"
#include "core/ops/elementwise.h"
#include "core/ops/softmax_cross_entropy.h"

namespace alloy::app {

void train_step(nn::Module& model, amp::MixedPrecision& precision, const Tensor& images,
                const Tensor& labels, Tensor& tally, DataParallel* data_parallel) {
  // O1's half copies of the weights are valid for one step: the update changes the weights.
  nn::clear_weight_cast_cache();
  const Tensor logits = model.forward(normalize_images(images, precision.input_dtype()));
  // The loss, its gradient scaled by the loss scale (so every gradient below it is scaled) and
  // the step tally's update, in one pass (one launch on the GPU). The loss and the logits'
  // gradient are freed as soon as backward has used them.
  model.backward(softmax_cross_entropy_step(logits, labels, precision.loss_scale(), tally).dlogits);
  if (data_parallel) data_parallel->after_backward();  // gradients averaged over the ranks
  precision.step();
  model.zero_grad();
  nn::clear_weight_cast_cache();
}

}  // namespace alloy::app
