#include "apps/train/train_step.h"

#include "apps/train/data_parallel.h"
#include "apps/train/micro_batches.h"
#include "apps/train/normalization.h"
#include "core/nn/cast_policy.h"
#include "core/ops/elementwise.h"
#include "core/ops/softmax_cross_entropy.h"

namespace alloy::app {

void train_step(nn::Module& model, amp::MixedPrecision& precision, const Tensor& images,
                const Tensor& labels, Tensor& tally, DataParallel* data_parallel,
                std::int64_t accumulation_steps, float label_smoothing,
                const Tensor& normalization) {
  // O1's half copies of the weights are valid for one step: the update changes the weights,
  // and nothing else does, so every micro-batch of the step shares them.
  nn::clear_weight_cast_cache();
  const std::int64_t rows = labels.numel();
  const auto micro_batch = [&](std::int64_t first, std::int64_t count) {
    const Tensor micro_images = batch_rows(images, first, count);
    const Tensor micro_labels = batch_rows(labels, first, count);
    const Tensor logits =
        model.forward(normalize_batch(micro_images, normalization, precision.input_dtype()));
    // The loss, its gradient scaled by the loss scale (so every gradient below it is scaled)
    // and divided by the step's rows, and the step tally's update, in one pass (one launch on
    // the GPU). The loss and the logits' gradient are freed as soon as backward has used them.
    model.backward(softmax_cross_entropy_step(logits, micro_labels, precision.loss_scale(), tally,
                                              rows, label_smoothing)
                       .dlogits);
  };
  for_each_micro_batch(rows, accumulation_steps, precision.optimizer().step_count(), data_parallel,
                       micro_batch);
  if (data_parallel) data_parallel->after_backward();  // gradients averaged over the ranks
  precision.step();
  model.zero_grad();
  nn::clear_weight_cast_cache();
}

}  // namespace alloy::app
