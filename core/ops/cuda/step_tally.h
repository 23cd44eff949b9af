// CUDA twin of core/ops/step_tally.h's kernel; the loss sum is rounded like the CPU's.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace alloy::cuda {

// *loss_sum += double(*loss) * rows; *correct += the rows whose largest logit is at the label.
void add_to_step_tally(double* loss_sum, unsigned long long* correct, const float* loss,
                       const void* logits, DType dtype, const std::int32_t* labels,
                       std::int64_t rows, std::int64_t classes, cudaStream_t stream);

}  // namespace alloy::cuda
