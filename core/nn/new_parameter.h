// Layers create their parameters and buffers here: f32 on the host in the parameters memory
// category, every element `value`. Models initialise them afterwards and the amp layer casts
// them, so layers stay free of initialisation schemes.
#pragma once

#include "core/tensor.h"

namespace alloy::nn {

inline Tensor new_parameter(const char* layer, const Shape& shape, float value) {
  for (const auto extent : shape) {
    ALLOY_CHECK(extent > 0, layer, ": parameter shape ", shape_str(shape), " needs positive sizes");
  }
  Tensor tensor = Tensor::empty(shape, DType::f32, Device::cpu(), MemoryCategory::parameters);
  tensor.fill(value);
  return tensor;
}

}  // namespace alloy::nn
