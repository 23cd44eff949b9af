// Weight initialisation schemes the models use. Each fills a host f32 tensor from
// `generator`, element by element in row-major order, so a seed fixes the model's weights on
// every platform.
#pragma once

#include <cmath>
#include <vector>

#include "core/nn/linear.h"
#include "core/random.h"
#include "core/tensor.h"

namespace alloy::models {

inline void init_normal(Tensor& tensor, double std, Generator& generator) {
  std::vector<float> values(static_cast<std::size_t>(tensor.numel()));
  for (auto& value : values)
    value = static_cast<float>(std * generator.normal());
  tensor.copy_from_floats(values);
}

// Uniform in [-bound, bound).
inline void init_uniform(Tensor& tensor, double bound, Generator& generator) {
  std::vector<float> values(static_cast<std::size_t>(tensor.numel()));
  for (auto& value : values)
    value = static_cast<float>(bound * (2.0 * generator.uniform() - 1.0));
  tensor.copy_from_floats(values);
}

// PyTorch's nn.Linear default: weight and bias uniform in +-1/sqrt(in_features).
inline void init_linear_default(nn::Linear& linear, Generator& generator) {
  Tensor& weight = linear.weight().value;
  const double bound = 1.0 / std::sqrt(static_cast<double>(weight.dim(1)));
  init_uniform(weight, bound, generator);
  if (linear.bias() != nullptr) init_uniform(linear.bias()->value, bound, generator);
}

}  // namespace alloy::models
