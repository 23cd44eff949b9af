// How CPU kernels meet half storage: they compute in fp32 only. FloatInput gives an fp32 view
// of a tensor (the tensor itself when it is f32, otherwise an exact widened copy); FloatOutput
// gives an fp32 buffer that commit() rounds once into a half tensor. That is exactly where a
// GPU kernel with fp32 accumulation rounds its result, so CPU and GPU agree on half outputs.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace alloy::cpu {

// Widen / narrow count elements between fp32 and `dtype` storage, in parallel.
void to_float(const void* source, DType dtype, float* target, std::int64_t count);
void from_float(const float* source, void* target, DType dtype, std::int64_t count);

class FloatInput {
 public:
  explicit FloatInput(const Tensor& tensor);
  const float* data() const { return data_; }

 private:
  Tensor widened_;
  const float* data_ = nullptr;
};

class FloatOutput {
 public:
  // accumulate: the buffer starts with the tensor's current values (for += kernels).
  FloatOutput(Tensor& tensor, bool accumulate);
  float* data() const { return data_; }
  // Rounds the buffer into the tensor (a no-op for f32 tensors, which were written directly).
  void commit();

 private:
  Tensor& target_;
  Tensor buffer_;
  float* data_ = nullptr;
};

}  // namespace alloy::cpu
