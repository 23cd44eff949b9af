#include <cmath>

#include "core/error.h"
#include "core/models/init.h"
#include "core/models/zoo.h"
#include "core/nn/batch_norm2d.h"
#include "core/nn/bottleneck_block.h"
#include "core/nn/conv2d.h"
#include "core/nn/flatten.h"
#include "core/nn/layout_boundary.h"
#include "core/nn/linear.h"
#include "core/nn/pool2d.h"
#include "core/nn/residual_block.h"
#include "core/nn/sequential.h"

namespace alloy::models {

namespace {

struct Depth {
  int blocks[4];
  bool bottleneck;
};

Depth depth_of(int depth) {
  switch (depth) {
    case 18:
      return {{2, 2, 2, 2}, false};
    case 34:
      return {{3, 4, 6, 3}, false};
    case 50:
      return {{3, 4, 6, 3}, true};
    default:
      fail("resnet: no ResNet of depth ", depth, " (18, 34 or 50)");
  }
}

// Output size of a square convolution or pooling window over `size` pixels.
int window_output(int size, int kernel, int stride, int padding) {
  return (size + 2 * padding - kernel) / stride + 1;
}

}  // namespace

std::unique_ptr<nn::Module> make_resnet(int depth, Generator& generator, int classes,
                                        ImageShape input) {
  const Depth shape = depth_of(depth);
  ALLOY_CHECK(input.channels >= 1 && input.size >= 1, "resnet", depth,
              ": images need at least one channel and pixel, got ", input.channels, "x", input.size,
              "x", input.size);
  auto net = std::make_unique<nn::Sequential>();
  // Everything up to the global average pool may run channels-last (Module::set_layout).
  net->add("enter_layout", std::make_unique<nn::EnterLayout>());
  int size = input.size;
  if (input.size >= kImageNetStemMinSize) {
    // torchvision's ImageNet stem: 7x7/2 convolution, batch norm, ReLU, 3x3/2 max pool.
    net->add("conv1", std::make_unique<nn::Conv2d>(input.channels, 64, 7, 2, 3, false));
    net->add("bn1", std::make_unique<nn::BatchNorm2d>(64, 0.1f, 1e-5f, /*fuse_relu=*/true));
    net->add("maxpool", std::make_unique<nn::MaxPool2d>(3, 2, 1));
    size = window_output(window_output(size, 7, 2, 3), 3, 2, 1);
  } else {
    // Small images keep their resolution: a 3x3 stem without max pool (CIFAR-style).
    net->add("conv1", std::make_unique<nn::Conv2d>(input.channels, 64, 3, 1, 1, false));
    // The stem's ReLU is fused into its batch norm (no parameters: the names are unchanged).
    net->add("bn1", std::make_unique<nn::BatchNorm2d>(64, 0.1f, 1e-5f, /*fuse_relu=*/true));
  }
  int in_channels = 64;
  const int widths[] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    const int stride = stage == 0 ? 1 : 2;
    auto layer = std::make_unique<nn::Sequential>();
    for (int block = 0; block < shape.blocks[stage]; ++block) {
      const int block_stride = block == 0 ? stride : 1;
      if (shape.bottleneck) {
        layer->emplace<nn::BottleneckBlock>(in_channels, widths[stage], block_stride);
        in_channels = widths[stage] * nn::BottleneckBlock::kExpansion;
      } else {
        layer->emplace<nn::ResidualBlock>(in_channels, widths[stage], block_stride);
        in_channels = widths[stage];
      }
    }
    net->add("layer" + std::to_string(stage + 1), std::move(layer));
    size = window_output(size, 3, stride, 1);  // the first block's strided 3x3 convolution
  }
  // Global average pooling over what is left (28x28 input: 28 -> 28 -> 14 -> 7 -> 4).
  net->add("avgpool", std::make_unique<nn::AvgPool2d>(size));
  net->add("leave_layout", std::make_unique<nn::LeaveLayout>());
  net->add("flatten", std::make_unique<nn::Flatten>());
  auto& fc =
      static_cast<nn::Linear&>(net->add("fc", std::make_unique<nn::Linear>(in_channels, classes)));

  // Kaiming normal (fan_out, relu) for every convolution, as torchvision's ResNet; batch norms
  // keep weight 1 and bias 0; the classifier keeps nn.Linear's default.
  for (nn::Parameter* parameter : net->parameters()) {
    const Tensor& value = parameter->value;
    if (value.ndim() != 4) continue;
    const double fan_out = static_cast<double>(value.dim(0) * value.dim(2) * value.dim(3));
    init_normal(parameter->value, std::sqrt(2.0 / fan_out), generator);
  }
  init_linear_default(fc, generator);
  return net;
}

}  // namespace alloy::models
