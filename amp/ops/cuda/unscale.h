// CUDA twin of amp/ops/unscale.h: one multi-tensor pass per 48 gradients, the scale read and
// the verdict written in device memory by the pass's last block (no separate reset or finish
// launch), and optionally the dynamic scaler's update run there too.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "amp/ops/cuda/scaler_step.h"
#include "core/dtype.h"

namespace alloy::amp::cuda {

struct UnscaleItem {
  const void* grad;
  DType grad_dtype;
  void* output;  // null: the check alone
  DType output_dtype;
  std::int64_t count;
};

// found_inf (f32) becomes 1 or 0; first_overflow (i32) the smallest item index holding a
// non-finite value, or -1. scale is f32 on the device. inverse_scale (f32, or null for none)
// receives the 1/scale the pass multiplies by, before any update. With an update (not null), the
// scaler's state machine (amp/ops/update_scale.h) then runs on that verdict in the same launch;
// its scale must be `scale`.
void unscale_and_check(const std::vector<UnscaleItem>& items, const float* scale, float* found_inf,
                       std::int32_t* first_overflow, float* inverse_scale, const ScalerStep* update,
                       cudaStream_t stream);

}  // namespace alloy::amp::cuda
