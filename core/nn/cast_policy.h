// O1's per-op cast policy. Layers ask it which dtype to compute in; the amp layer turns it on.
// Off (the default), every layer computes in its parameters' dtype, so O0, O2 and O3 need no
// casts beyond feeding the model inputs of the right dtype.
#pragma once

#include "core/tensor.h"

namespace alloy::nn {

// How an op treats precision under O1 (Apex's lists).
enum class OpClass {
  half_compute,  // conv, linear, matmul: tensor-core work in half
  fp32_compute,  // softmax, losses, exp/log, reductions
  // Batch norm: statistics, parameters and arithmetic in fp32 on data stored in the input's
  // dtype (half in, half out, as cuDNN and PyTorch autocast do), so a half convolution's output
  // is normalised without an fp32 copy. The ops take that mix only with fp32 parameters; half
  // parameters (O3) take their own dtype.
  fp32_statistics,
  follow_input,  // relu, gelu, pooling, flatten: the input's dtype, whatever it is
  promote,       // several inputs (residual add): the widest of them
};

struct CastPolicy {
  bool enabled = false;
  DType half_dtype = DType::f16;
};

// The process-wide policy (a training process runs one model at one opt level).
void set_cast_policy(const CastPolicy& policy);
const CastPolicy& cast_policy();

// The dtype an op of class `op` computes in (fp32_statistics: stores its input and output in),
// given its input's and parameters' dtypes.
DType compute_dtype(OpClass op, DType input, DType parameters);
// For `promote`: the wider of two dtypes (f32 over half).
DType promote(DType a, DType b);

// x in `dtype`: x itself when it already is, else a converted copy.
Tensor cast_if_needed(const Tensor& x, DType dtype);

// O1 casts each fp32 weight to half once per step, not once per use; the copies live until
// clear_weight_cast_cache() at the end of the step.
const Tensor& cached_weight_cast(const Tensor& weight, DType dtype);
void clear_weight_cast_cache();

}  // namespace alloy::nn
