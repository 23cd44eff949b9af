#include "core/models/init.h"
#include "core/models/zoo.h"
#include "core/nn/conv2d.h"
#include "core/nn/flatten.h"
#include "core/nn/linear.h"
#include "core/nn/pool2d.h"
#include "core/nn/relu.h"
#include "core/nn/sequential.h"

namespace alloy::models {

std::unique_ptr<nn::Module> make_lenet(Generator& generator, int classes) {
  auto net = std::make_unique<nn::Sequential>();
  net->emplace<nn::Conv2d>(1, 20, 3);  // 28 -> 26
  net->emplace<nn::ReLU>();
  net->emplace<nn::AvgPool2d>(2);       // -> 13
  net->emplace<nn::Conv2d>(20, 50, 5);  // -> 9
  net->emplace<nn::ReLU>();
  net->emplace<nn::AvgPool2d>(2);  // -> 4
  net->emplace<nn::Flatten>();     // 50 * 4 * 4 = 800
  net->emplace<nn::Linear>(800, 128);
  net->emplace<nn::ReLU>();
  net->emplace<nn::Linear>(128, classes);
  // The reference recipe: every weight N(0, 0.01); biases stay 0.
  for (nn::Parameter* parameter : net->parameters()) {
    if (parameter->value.ndim() > 1) init_normal(parameter->value, 0.01, generator);
  }
  return net;
}

}  // namespace alloy::models
