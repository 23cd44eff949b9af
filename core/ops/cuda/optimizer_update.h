// CUDA twins of core/ops/optimizer_update.h's fused updates. The parameter may be f32 or half
// (updated in fp32 and rounded once), the gradient any floating dtype, the state f32. When
// found_inf is not null and *found_inf is nonzero (NaN included) every thread returns at once:
// the step is skipped without the host reading the flag.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/ops/optimizer_update.h"

namespace alloy::cuda {

void sgd_update(void* param, DType param_dtype, const void* grad, DType grad_dtype,
                float* momentum_buffer, std::int64_t count, const SgdHyper& hyper, bool first_step,
                const float* found_inf, cudaStream_t stream);
void adamw_update(void* param, DType param_dtype, const void* grad, DType grad_dtype,
                  float* exp_avg, float* exp_avg_sq, std::int64_t count, const AdamWHyper& hyper,
                  std::int64_t step, const float* found_inf, cudaStream_t stream);

}  // namespace alloy::cuda
