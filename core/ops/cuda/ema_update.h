// CUDA twin of core/ops/ema_update.h: one multi-tensor launch per 64 tensors, the same float
// operations as the CPU kernel (__fmul_rn, then __fmaf_rn), so the same bits. When skip is not
// null and *skip is nonzero (NaN included) every block returns at once, read on the device at
// every launch or graph replay; decay is a kernel argument, fixed in a captured graph, and when
// updates is not null the kernel warms it up with *updates (warmed_up_decay), read likewise.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "core/ops/ema_update.h"

namespace alloy::cuda {

// Every tensor has count > 0; decay in [0, 1).
void ema_update(const std::vector<EmaBuffers>& tensors, float decay, const float* skip,
                const std::int32_t* updates, cudaStream_t stream);

}  // namespace alloy::cuda
