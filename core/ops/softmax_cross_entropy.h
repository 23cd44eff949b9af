// Mean softmax cross-entropy over a batch, computed in fp32 whatever the logits' dtype.
// logits: [N, C] floating; labels: i32 [N] with values in [0, C).
#pragma once

#include <cstdint>

#include "core/ops/step_tally.h"
#include "core/tensor.h"

namespace alloy {

struct SoftmaxCrossEntropyResult {
  Tensor loss;           // f32 [1]: mean over the batch
  Tensor probabilities;  // f32 [N, C]: kept for backward
};

SoftmaxCrossEntropyResult softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels);

// dlogits = grad_scale * (probabilities - onehot(labels)) / N, in `dtype` (the logits' dtype).
// grad_scale carries the loss scale, so scaled gradients are produced in one pass.
Tensor softmax_cross_entropy_backward(const Tensor& probabilities, const Tensor& labels,
                                      float grad_scale, DType dtype);
// The same with the scale read where it lives (f32 [1] on the probabilities' device), so a
// dynamic loss scale never has to visit the host.
Tensor softmax_cross_entropy_backward(const Tensor& probabilities, const Tensor& labels,
                                      const Tensor& loss_scale, DType dtype);

// The training step's loss in one pass (one kernel launch on the GPU): the mean loss, the
// scaled gradient of the logits and the step tally's update (core/ops/step_tally.h). With the
// default gradient_rows, bit for bit what softmax_cross_entropy_forward,
// softmax_cross_entropy_backward(probabilities, labels, loss_scale, logits.dtype()) and
// add_to_step_tally(tally, loss, logits, labels) give one after the other, on either backend,
// without keeping the probabilities. loss_scale: f32 [1], read where it lives; tally: a step tally
// on the logits' device, added to in place. gradient_rows: the rows of the mean whose gradient
// dlogits is, at least the logits' rows; 0 (the default) means the logits' rows. A micro-batch of
// gradient accumulation passes the rows of its whole step (apps/train_step.h), so that the
// gradients summed over the step's micro-batches are those of the step's mean loss; the loss and
// the tally stay the micro-batch's.
struct SoftmaxCrossEntropyStep {
  Tensor loss;     // f32 [1]: mean over the batch
  Tensor dlogits;  // [N, C] in the logits' dtype: loss_scale * (p - onehot) / gradient_rows
};
SoftmaxCrossEntropyStep softmax_cross_entropy_step(const Tensor& logits, const Tensor& labels,
                                                   const Tensor& loss_scale, Tensor& tally,
                                                   std::int64_t gradient_rows = 0);

// How many rows' largest logit is at the label (first maximum wins ties; a NaN counts as the
// largest).
std::int64_t count_correct(const Tensor& logits, const Tensor& labels);

namespace cpu {
// Labels must already be in [0, classes). Returns the mean loss; the per-row losses are
// summed in row order, so the result does not depend on the thread count.
float softmax_cross_entropy_forward(const void* logits, DType dtype, const std::int32_t* labels,
                                    float* probabilities, std::int64_t rows, std::int64_t classes);
void softmax_cross_entropy_backward(const float* probabilities, const std::int32_t* labels,
                                    float grad_scale, void* dlogits, DType dtype, std::int64_t rows,
                                    std::int64_t classes);
std::int64_t count_correct(const void* logits, DType dtype, const std::int32_t* labels,
                           std::int64_t rows, std::int64_t classes);
// dlogits has the logits' dtype, grad_scale * (p - onehot) / gradient_rows. Returns the mean
// loss over the `rows`, also added to *tally with the count.
float softmax_cross_entropy_step(const void* logits, DType dtype, const std::int32_t* labels,
                                 float grad_scale, void* dlogits, StepTally* tally,
                                 std::int64_t rows, std::int64_t classes,
                                 std::int64_t gradient_rows);
}  // namespace cpu

}  // namespace alloy
