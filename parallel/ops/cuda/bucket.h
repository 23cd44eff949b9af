// CUDA twin of parallel/ops/bucket.h: scaled copies between gradients and a bucket, one
// multi-tensor launch per 48 copies.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace alloy::parallel::cuda {

struct ScaledCopyItem {
  const void* from;  // nullptr: write zeros
  DType from_dtype;
  void* to;
  DType to_dtype;
  std::int64_t count;
};

// to[i] = round(float(from[i]) * factor) for each item; a bit copy for equal dtypes and factor 1.
void scaled_copy(const std::vector<ScaledCopyItem>& items, float factor, cudaStream_t stream);

}  // namespace alloy::parallel::cuda
