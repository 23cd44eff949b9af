#include "core/models/init.h"
#include "core/models/zoo.h"
#include "core/nn/flatten.h"
#include "core/nn/linear.h"
#include "core/nn/relu.h"
#include "core/nn/sequential.h"

namespace alloy::models {

std::unique_ptr<nn::Module> make_mlp(Generator& generator, int classes) {
  auto net = std::make_unique<nn::Sequential>();
  net->emplace<nn::Flatten>();
  init_linear_default(net->emplace<nn::Linear>(28 * 28, 256), generator);
  net->emplace<nn::ReLU>();
  init_linear_default(net->emplace<nn::Linear>(256, classes), generator);
  return net;
}

}  // namespace alloy::models
