// CUDA twins of core/ops/optimizer_update.h's multi-tensor updates: one launch per 64 tensors.
// The kernels read lr, the step count, found_inf and the gradients' factors from device memory;
// when found_inf is not null and *found_inf is nonzero (NaN included) every block returns at
// once: the step is skipped, step count included, without the host reading the flag. Otherwise
// the last launch's last block to finish advances step[0] (step[1] counts finished blocks and
// returns to zero). Each gradient element is first multiplied by *unscale, then by *factor (each
// product rounded to f32; a null factor is none), as on the CPU. Every tensor has count > 0.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "core/ops/optimizer_update.h"

namespace alloy::cuda {

// Device addresses of core/ops/optimizer_update.h's grad_unscale and grad_factor, or null.
struct GradFactors {
  const float* unscale;
  const float* factor;
};

void sgd_update(const std::vector<UpdateBuffers>& tensors, const SgdHyper& hyper, const float* lr,
                std::int32_t* step, const float* found_inf, GradFactors factors,
                cudaStream_t stream);
void adamw_update(const std::vector<UpdateBuffers>& tensors, const AdamWHyper& hyper,
                  const float* lr, std::int32_t* step, const float* found_inf, GradFactors factors,
                  cudaStream_t stream);

}  // namespace alloy::cuda
