// The copies between gradients and a gradient bucket's flat buffer in data parallelism, with the
// scaling around the collective: copy-in multiplies by the predivide factor's inverse, copy-out
// by the postdivide factor (see parallel/ddp.h). Values are widened to fp32, multiplied, and
// rounded once to the destination's dtype (to nearest even), so half gradients scale exactly as
// the CPU always did and a half bucket can be widened into an f32 one for an fp32 reduction. A
// factor of 1 between equal dtypes copies the bits. On a device the copies are one multi-tensor
// kernel per 48 gradients, queued on the given stream (the communication stream).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "parallel/process_group.h"

namespace alloy::parallel {

// One gradient's stretch of a bucket.
struct BucketSlice {
  Tensor grad;              // undefined: never computed in this backward
  std::int64_t offset = 0;  // its first element in the bucket
  std::int64_t count = 0;   // its elements
};

// bucket[offset + i] = grad[i] * factor for every slice; zeros where the gradient is undefined.
// `stream`: the CUDA stream for tensors on a device (nullptr: the device's stream).
void copy_into_bucket(const std::vector<BucketSlice>& slices, const Tensor& bucket, float factor,
                      StreamHandle stream = nullptr);
// grad[i] = bucket[offset + i] * factor for every slice with a defined gradient.
void copy_from_bucket(const Tensor& bucket, const std::vector<BucketSlice>& slices, float factor,
                      StreamHandle stream = nullptr);

namespace cpu {
// to[i] = from[i] * factor, i < count, as above; from == nullptr writes zeros.
void scaled_copy(const void* from, DType from_dtype, void* to, DType to_dtype, std::int64_t count,
                 float factor);
}  // namespace cpu

}  // namespace alloy::parallel
