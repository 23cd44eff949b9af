// The model zoo. Every model takes [N, 1, 28, 28] images and returns [N, classes] logits.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/nn/module.h"
#include "core/random.h"

namespace alloy::models {

// "lenet": the reference recipe's LeNet (conv 1->20 3x3, relu, avgpool 2; conv 20->50 5x5,
//          relu, avgpool 2; linear 800->128, relu; linear 128->10), weights N(0, 0.01),
//          biases 0.
// "mlp":   784 -> 256 -> relu -> 10.
// "resnet18": CIFAR-style ResNet-18 (3x3 stem, no max-pool) adapted to 28x28x1 input.
// Initialisation draws from `generator` in parameter registration order.
std::unique_ptr<nn::Module> make_model(const std::string& name, Generator& generator,
                                       int classes = 10);

std::vector<std::string> model_names();

}  // namespace alloy::models
