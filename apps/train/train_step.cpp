#include "apps/train/train_step.h"

#include <optional>

#include "apps/train/data_parallel.h"
#include "apps/train/micro_batches.h"
#include "apps/train/normalization.h"
#include "core/nn/cast_policy.h"
#include "core/nn/dropout.h"
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
  const std::vector<std::int64_t> sizes = micro_batch_sizes(rows, accumulation_steps);
  // Dropout masks follow each example's row in the global batch: rank r of W holds global rows
  // r + W * j (parallel/distributed_sampler.h), so however the batch is split they are one pass's.
  const std::int64_t rank = data_parallel ? data_parallel->rank() : 0;
  const std::int64_t world = data_parallel ? data_parallel->world_size() : 1;
  std::int64_t first = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    // Backwards before the last only accumulate: the last one's reduces the sum (DDP's
    // no_sync, parallel/ddp.h), so a step costs one allreduce however it is split.
    std::optional<parallel::DistributedDataParallel::NoSync> accumulate_only;
    if (data_parallel && i + 1 < sizes.size()) accumulate_only.emplace(data_parallel->ddp());
    const Tensor micro_images = batch_rows(images, first, sizes[i]);
    const Tensor micro_labels = batch_rows(labels, first, sizes[i]);
    const nn::DropoutStreamScope dropout_stream(
        {&precision.optimizer().step_count(), rank + world * first, world});
    first += sizes[i];
    const Tensor logits =
        model.forward(normalize_batch(micro_images, normalization, precision.input_dtype()));
    // The loss, its gradient scaled by the loss scale (so every gradient below it is scaled)
    // and divided by the step's rows, and the step tally's update, in one pass (one launch on
    // the GPU). The loss and the logits' gradient are freed as soon as backward has used them.
    model.backward(softmax_cross_entropy_step(logits, micro_labels, precision.loss_scale(), tally,
                                              rows, label_smoothing)
                       .dlogits);
  }
  if (data_parallel) data_parallel->after_backward();  // gradients averaged over the ranks
  precision.step();
  model.zero_grad();
  nn::clear_weight_cast_cache();
}

}  // namespace alloy::app
