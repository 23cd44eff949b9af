// The model zoo. Every model takes [N, 1, 28, 28] images and returns [N, classes] logits.
#pragma once

#include <functional>
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
// "ffn":   a pre-norm transformer's feed-forward stack on the flattened image: linear 784->256;
//          4 residual blocks x + linear(dropout(gelu(linear(layer_norm(x))))) (256->512->256,
//          exact GELU, dropout 0.1); layer norm; linear 256->10. Linear layers initialised as
//          PyTorch's default, layer norms at weight 1, bias 0.
// Any other name: a model added with register_model.
// Initialisation draws from `generator` in parameter registration order.
std::unique_ptr<nn::Module> make_model(const std::string& name, Generator& generator,
                                       int classes = 10);

// The zoo's names, then the registered ones in registration order: the choices of --model.
std::vector<std::string> model_names();

// Builds a model of `classes` outputs, drawing its initial weights from `generator` only, so
// that a seed fixes them (and a resumed or data-parallel run rebuilds the same model).
using ModelFactory = std::function<std::unique_ptr<nn::Module>(Generator& generator, int classes)>;

// Adds a model of the program's own to the zoo: from then on make_model builds it by `name`,
// so the Trainer, checkpoints (which record the name), `alloy train --model NAME` and `alloy
// mem --model NAME` of this program (apps/alloy_main.h) take it like a built-in model.
// Throws UsageError when `name` is empty or already taken.
void register_model(const std::string& name, ModelFactory factory);

}  // namespace alloy::models
