#include <cmath>

#include "core/models/init.h"
#include "core/models/zoo.h"
#include "core/nn/batch_norm2d.h"
#include "core/nn/conv2d.h"
#include "core/nn/flatten.h"
#include "core/nn/layout_boundary.h"
#include "core/nn/linear.h"
#include "core/nn/pool2d.h"
#include "core/nn/residual_block.h"
#include "core/nn/sequential.h"

namespace alloy::models {

namespace {
constexpr int kImageSize = 28;
}  // namespace

std::unique_ptr<nn::Module> make_resnet18(Generator& generator, int classes) {
  auto net = std::make_unique<nn::Sequential>();
  // Everything up to the global average pool may run channels-last (Module::set_layout).
  net->add("enter_layout", std::make_unique<nn::EnterLayout>());
  net->add("conv1", std::make_unique<nn::Conv2d>(1, 64, 3, 1, 1, false));
  // The stem's ReLU is fused into its batch norm (no parameters: the names are unchanged).
  net->add("bn1", std::make_unique<nn::BatchNorm2d>(64, 0.1f, 1e-5f, /*fuse_relu=*/true));
  int in_channels = 64;
  int size = kImageSize;
  const int widths[] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    const int stride = stage == 0 ? 1 : 2;
    auto layer = std::make_unique<nn::Sequential>();
    layer->emplace<nn::ResidualBlock>(in_channels, widths[stage], stride);
    layer->emplace<nn::ResidualBlock>(widths[stage], widths[stage], 1);
    net->add("layer" + std::to_string(stage + 1), std::move(layer));
    in_channels = widths[stage];
    size = (size + 2 * 1 - 3) / stride + 1;  // the first block's 3x3 convolution, padding 1
  }
  // Global average pooling: 28 -> 28 -> 14 -> 7 -> 4.
  net->add("avgpool", std::make_unique<nn::AvgPool2d>(size));
  net->add("leave_layout", std::make_unique<nn::LeaveLayout>());
  net->add("flatten", std::make_unique<nn::Flatten>());
  auto& fc = static_cast<nn::Linear&>(net->add("fc", std::make_unique<nn::Linear>(512, classes)));

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
