// Multi-tensor launches (as in Apex's multi_tensor_apply): up to kMaxTensors tensors' pointers,
// sizes and dtypes travel in one kernel argument, so a pass over every gradient of a model is
// a handful of launches with no host-to-device copy of metadata, and capturable in a graph.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace alloy::cuda {

struct TensorPairList {
  // 48 entries keep the argument well under the 4 KiB kernel-parameter limit of older drivers.
  static constexpr int kMaxTensors = 48;
  const void* input[kMaxTensors];
  void* output[kMaxTensors];
  std::int64_t count[kMaxTensors];
  std::int32_t index[kMaxTensors];  // the tensor's position in the caller's full list
  DType input_dtype[kMaxTensors];
  DType output_dtype[kMaxTensors];
  int size;
};

}  // namespace alloy::cuda
