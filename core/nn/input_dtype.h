// Layers compute in their parameters' dtype and the ops require matching dtypes, so an input
// of another dtype is converted here on the way in, and its gradient converted back on the
// way out. This is the one place where the O1 cast policy will decide instead.
#pragma once

#include "core/ops/elementwise.h"
#include "core/tensor.h"

namespace alloy::nn {

// x itself when it already has `dtype`, else a converted copy.
inline Tensor in_dtype(const Tensor& x, DType dtype) {
  return x.dtype() == dtype ? x : cast(x, dtype);
}

}  // namespace alloy::nn
