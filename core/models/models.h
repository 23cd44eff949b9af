// The model zoo. Models take [N, C, S, S] images and return [N, classes] logits; lenet, mlp and
// ffn take 1x28x28 images only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/nn/module.h"
#include "core/random.h"

namespace alloy::models {

// The images a model takes: channels x size x size.
struct ImageShape {
  int channels = 1;
  int size = 28;
};

// The ResNets' ImageNet stem is for images at least this large; smaller ones keep their
// resolution through a 3x3 stem.
constexpr int kImageNetStemMinSize = 64;

// "lenet": the reference recipe's LeNet (conv 1->20 3x3, relu, avgpool 2; conv 20->50 5x5,
//          relu, avgpool 2; linear 800->128, relu; linear 128->10), weights N(0, 0.01),
//          biases 0.
// "mlp":   784 -> 256 -> relu -> 10.
// "resnet18", "resnet34", "resnet50": torchvision's ImageNet ResNets (7x7/2 stem convolution,
//          batch norm, ReLU, 3x3/2 max pool; basic blocks [2,2,2,2] or [3,4,6,3], or v1.5
//          bottlenecks [3,4,6,3] with the stride on the 3x3 convolution; global average pool;
//          fc) for images of at least kImageNetStemMinSize pixels a side. Smaller images get a
//          CIFAR-style stem instead (3x3 convolution, stride 1, no max pool). Convolutions are
//          Kaiming normal (fan_out), nothing is zero-initialised.
// "ffn":   a pre-norm transformer's feed-forward stack on the flattened image: linear 784->256;
//          4 residual blocks x + linear(dropout(gelu(linear(layer_norm(x))))) (256->512->256,
//          exact GELU, dropout 0.1); layer norm; linear 256->10. Linear layers initialised as
//          PyTorch's default, layer norms at weight 1, bias 0.
// Any other name: a model added with register_model.
// Initialisation draws from `generator` in parameter registration order. A registered model's
// factory gets no `input`: it takes what it was written for.
std::unique_ptr<nn::Module> make_model(const std::string& name, Generator& generator,
                                       int classes = 10, ImageShape input = {});

// The shape of square images [C, S, S].
ImageShape image_shape_of(const Shape& image);

// Fails (Error) when zoo model `name` cannot take `input` images; registered models pass.
void check_model_input(const std::string& name, ImageShape input);

// The zoo's names, then the registered ones in registration order: the choices of --model.
std::vector<std::string> model_names();

// Builds a model of `classes` outputs, drawing its initial weights from `generator` only, so
// that a seed fixes them (and a resumed or data-parallel run rebuilds the same model).
using ModelFactory = std::function<std::unique_ptr<nn::Module>(Generator& generator, int classes)>;

// Adds a model of the program's own to the zoo: from then on make_model builds it by `name`,
// so the Trainer, checkpoints (which record the name), `alloy train --model NAME` and `alloy
// mem --model NAME` of this program (apps/cli/alloy_main.h) take it like a built-in model.
// Throws UsageError when `name` is empty or already taken.
void register_model(const std::string& name, ModelFactory factory);

}  // namespace alloy::models
