// Mean softmax cross-entropy over a batch, computed in fp32 whatever the logits' dtype.
// logits: [N, C] floating; labels: i32 [N] with values in [0, C).
//
// label_smoothing (eps, in [0, 1)) is PyTorch's nn.CrossEntropyLoss(label_smoothing=eps): the
// target is q = (1 - eps) * onehot(label) + eps / C, a row's loss is -sum_k q_k log p_k =
// (1 - eps) * (-log p_label) + (eps / C) * sum_k (-log p_k), and the gradient of the mean is
// (p - q) / N. The floats: with keep = 1 - eps, off = eps / C and on = keep + off
// (label_smoothing_terms below), each -log p_k = log(sum) + (max - x_k) in fp32, their sum over
// the row in fp32 (in class order on the CPU, a block reduction on CUDA), the row's loss
// fma(off, that sum, fl(keep * -log p_label)) and the gradient's target on at the label, off
// elsewhere. eps 0 leaves the unsmoothed arithmetic alone: the row's loss is -log p_label
// itself (no 0 * a sum that a -inf logit makes infinite), and p - 0 and p - 1 are the
// unsmoothed gradient's bits.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "core/ops/step_tally.h"
#include "core/tensor.h"

namespace alloy {

// Label smoothing's constants, formed the same way by the CPU and the CUDA kernels.
struct LabelSmoothingTerms {
  float keep;  // 1 - eps: the weight of -log p at the label
  float off;   // eps / classes: the target away from the label
  float on;    // keep + off: the target at the label
};
ALLOY_HOST_DEVICE inline LabelSmoothingTerms label_smoothing_terms(float label_smoothing,
                                                                   std::int64_t classes) {
  const float keep = 1.0f - label_smoothing;
  const float off = label_smoothing / static_cast<float>(classes);
  return {keep, off, keep + off};
}

struct SoftmaxCrossEntropyResult {
  Tensor loss;           // f32 [1]: mean over the batch
  Tensor probabilities;  // f32 [N, C]: kept for backward
};

// The probabilities do not depend on label_smoothing; the loss does.
SoftmaxCrossEntropyResult softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels,
                                                        float label_smoothing = 0.0f);

// dlogits = grad_scale * (probabilities - q) / N, in `dtype` (the logits' dtype), q the
// (smoothed) target above. grad_scale carries the loss scale, so scaled gradients are produced
// in one pass.
Tensor softmax_cross_entropy_backward(const Tensor& probabilities, const Tensor& labels,
                                      float grad_scale, DType dtype, float label_smoothing = 0.0f);
// The same with the scale read where it lives (f32 [1] on the probabilities' device), so a
// dynamic loss scale never has to visit the host.
Tensor softmax_cross_entropy_backward(const Tensor& probabilities, const Tensor& labels,
                                      const Tensor& loss_scale, DType dtype,
                                      float label_smoothing = 0.0f);

// The training step's loss in one pass (one kernel launch on the GPU): the mean loss, the
// scaled gradient of the logits and the step tally's update (core/ops/step_tally.h). With the
// default gradient_rows, bit for bit what softmax_cross_entropy_forward,
// softmax_cross_entropy_backward(probabilities, labels, loss_scale, logits.dtype()) and
// add_to_step_tally(tally, loss, logits, labels) give one after the other (with the same
// label_smoothing; the tally sums the smoothed losses, as PyTorch reports them), on either backend,
// without keeping the probabilities. loss_scale: f32 [1], read where it lives; tally: a step tally
// on the logits' device, added to in place. gradient_rows: the rows of the mean whose gradient
// dlogits is, at least the logits' rows; 0 (the default) means the logits' rows. A micro-batch of
// gradient accumulation passes the rows of its whole step (apps/train/train_step.h), so that the
// gradients summed over the step's micro-batches are those of the step's mean loss; the loss and
// the tally stay the micro-batch's.
struct SoftmaxCrossEntropyStep {
  Tensor loss;     // f32 [1]: mean over the batch
  Tensor dlogits;  // [N, C] in the logits' dtype: loss_scale * (p - q) / gradient_rows
};
SoftmaxCrossEntropyStep softmax_cross_entropy_step(const Tensor& logits, const Tensor& labels,
                                                   const Tensor& loss_scale, Tensor& tally,
                                                   std::int64_t gradient_rows = 0,
                                                   float label_smoothing = 0.0f);

// How many rows' largest logit is at the label (first maximum wins ties; a NaN counts as the
// largest).
std::int64_t count_correct(const Tensor& logits, const Tensor& labels);

namespace cpu {
// Labels must already be in [0, classes), label_smoothing in [0, 1). Returns the mean loss; the
// per-row losses are summed in row order, so the result does not depend on the thread count.
float softmax_cross_entropy_forward(const void* logits, DType dtype, const std::int32_t* labels,
                                    float* probabilities, std::int64_t rows, std::int64_t classes,
                                    float label_smoothing);
void softmax_cross_entropy_backward(const float* probabilities, const std::int32_t* labels,
                                    float grad_scale, void* dlogits, DType dtype, std::int64_t rows,
                                    std::int64_t classes, float label_smoothing);
std::int64_t count_correct(const void* logits, DType dtype, const std::int32_t* labels,
                           std::int64_t rows, std::int64_t classes);
// dlogits has the logits' dtype, grad_scale * (p - q) / gradient_rows. Returns the mean loss
// over the `rows`, also added to *tally with the count.
float softmax_cross_entropy_step(const void* logits, DType dtype, const std::int32_t* labels,
                                 float grad_scale, void* dlogits, StepTally* tally,
                                 std::int64_t rows, std::int64_t classes,
                                 std::int64_t gradient_rows, float label_smoothing);
}  // namespace cpu

}  // namespace alloy
