// CUDA twin of amp/ops/master_copy.h: fp32 masters rounded into the model's parameters, one
// multi-tensor launch per 48 tensors.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace alloy::amp::cuda {

struct MasterCopyItem {
  const float* master;
  void* model;
  DType model_dtype;
  std::int64_t count;
};

void copy_masters_to_model(const std::vector<MasterCopyItem>& items, cudaStream_t stream);

}  // namespace alloy::amp::cuda
