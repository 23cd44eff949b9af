// The device work of one training step, in one place for the two commands that run it:
// `alloy train` (apps/train/trainer.h, eagerly or under CUDA graph capture) and `alloy mem`
// (apps/train/memory_report.h), whose figures must be those of the step that trains, buffer for
// buffer. The step: forward on the normalised batch, the fused loss (core/ops/
// softmax_cross_entropy.h: loss, scaled logit gradient and tally in one pass, keeping no
// probabilities), backward, data parallelism's gradient average, the amp layer's step (unscale,
// scaler update, optimizer, master -> model copy) and zero_grad.
//
// Gradient accumulation (--accumulation-steps N): the batch is processed as N micro-batches
// (apps/train/micro_batches.h), views of it, each forward and backward in turn, their gradients
// accumulating in the parameters' gradients; then one amp step. Each micro-batch's logit
// gradient is divided by the rows of the whole step, so the accumulated gradient is that of the
// step's mean loss, as one pass over the batch would give (up to rounding), and the loss scale,
// the overflow check and the scaler's update are the step's, once. Each micro-batch runs inside
// an nn::DropoutStreamScope (core/nn/dropout.h) holding the optimizer's step count and its rows'
// places in the global batch, so dropout masks are those of one pass over the global batch,
// whatever the accumulation steps or world size. Batch norm computes its
// statistics per micro-batch (as PyTorch does with accumulation). With data parallelism the
// backwards of all micro-batches but the last run inside DDP's no_sync(): one allreduce per
// step, of the accumulated gradients.
#pragma once

#include <cstdint>

#include "amp/mixed_precision.h"
#include "core/nn/module.h"
#include "core/tensor.h"

namespace alloy::app {

class DataParallel;

// images: a batch as the loader stores it, on the model's device (normalised here to the amp
// layer's input dtype); labels: i32 [N] there too; tally: a step tally there
// (core/ops/step_tally.h), which the step adds its loss and correct count to (the step's only
// output the host may read); data_parallel: the replica's DDP, or null for one process;
// accumulation_steps: the micro-batches the batch is split into (1: one pass, as without
// accumulation, bit for bit); label_smoothing: the loss's, as PyTorch's
// CrossEntropyLoss(label_smoothing) (core/ops/softmax_cross_entropy.h; 0: none, bit for bit);
// normalization: the per-channel table of --normalize on the model's device (apps/
// normalization.h), or undefined for pixels / 255.
void train_step(nn::Module& model, amp::MixedPrecision& precision, const Tensor& images,
                const Tensor& labels, Tensor& tally, DataParallel* data_parallel = nullptr,
                std::int64_t accumulation_steps = 1, float label_smoothing = 0.0f,
                const Tensor& normalization = Tensor());

}  // namespace alloy::app
