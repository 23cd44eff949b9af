// CUDA twins of core/ops/softmax_cross_entropy.h's kernels; all math in fp32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/ops/softmax_cross_entropy.h"

namespace alloy::cuda {

// Writes the mean loss to *loss (device), in one launch (the last block to finish forms the
// mean). `row_loss` is device scratch of `rows` floats; the per-row losses are summed in double
// in a fixed tree order: deterministic, and equal to the CPU's row-order sum whenever that
// double sum is exact. A label outside [0, classes) makes its row's loss NaN (labels live on
// the device and are not checked there). label_smoothing as in core/ops/softmax_cross_entropy.h
// (its sum over a row is a block reduction, in another order than the CPU's).
void softmax_cross_entropy_forward(const void* logits, DType dtype, const std::int32_t* labels,
                                   float* probabilities, float* row_loss, float* loss,
                                   std::int64_t rows, std::int64_t classes, float label_smoothing,
                                   cudaStream_t stream);
// grad_scale is multiplied by *grad_scale_device when that is not null (the loss scale read
// where it lives).
void softmax_cross_entropy_backward(const float* probabilities, const std::int32_t* labels,
                                    float grad_scale, const float* grad_scale_device, void* dlogits,
                                    DType dtype, std::int64_t rows, std::int64_t classes,
                                    float label_smoothing, cudaStream_t stream);
// softmax_cross_entropy_forward, _backward with grad_scale 1 and the device scale, and
// count_correct with the loss sum, in one launch and bit-identical to them: the mean loss to
// *loss, loss_scale * the gradient of the mean loss to dlogits (the logits' dtype), and the
// step tally's update to *loss_sum and *correct. row_loss and row_correct are device scratch
// of `rows` elements each. The gradient divides by gradient_rows (rows: the same bits as the
// backward) where a micro-batch takes its share of a larger step's mean.
void softmax_cross_entropy_step(const void* logits, DType dtype, const std::int32_t* labels,
                                const float* loss_scale, void* dlogits, float* row_loss,
                                std::uint32_t* row_correct, float* loss, double* loss_sum,
                                unsigned long long* correct, std::int64_t rows,
                                std::int64_t classes, std::int64_t gradient_rows,
                                float label_smoothing, cudaStream_t stream);
// Adds the number of correct rows to *correct (device). With a loss_sum it also adds
// double(*loss) * rows to *loss_sum in the same launch, rounded like the CPU's step tally.
void count_correct(const void* logits, DType dtype, const std::int32_t* labels,
                   unsigned long long* correct, std::int64_t rows, std::int64_t classes,
                   cudaStream_t stream, const float* loss = nullptr, double* loss_sum = nullptr);

}  // namespace alloy::cuda
