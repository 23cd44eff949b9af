// Mean softmax cross-entropy over a batch, computed in fp32 whatever the logits' dtype.
// logits: [N, C] floating; labels: i32 [N] with values in [0, C).
#pragma once

#include "core/tensor.h"

namespace alloy {

struct SoftmaxCrossEntropyResult {
  Tensor loss;           // f32 [1]: mean over the batch
  Tensor probabilities;  // f32 [N, C]: kept for backward
};

SoftmaxCrossEntropyResult softmax_cross_entropy_forward(const Tensor& logits,
                                                        const Tensor& labels);

// dlogits = grad_scale * (probabilities - onehot(labels)) / N, in `dtype` (the logits' dtype).
// grad_scale carries the loss scale, so scaled gradients are produced in one pass.
Tensor softmax_cross_entropy_backward(const Tensor& probabilities, const Tensor& labels,
                                      float grad_scale, DType dtype);

// How many rows' largest logit is at the label (first maximum wins ties).
std::int64_t count_correct(const Tensor& logits, const Tensor& labels);

}  // namespace alloy
