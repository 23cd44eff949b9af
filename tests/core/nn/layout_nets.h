// A small convolution net with a layout region, and one training step's results, for the
// layout tests (layout_boundary_test.cpp on the CPU, its GPU twin on CUDA).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/models/init.h"
#include "core/nn/batch_norm2d.h"
#include "core/nn/conv2d.h"
#include "core/nn/flatten.h"
#include "core/nn/layout_boundary.h"
#include "core/nn/linear.h"
#include "core/nn/pool2d.h"
#include "core/nn/residual_block.h"
#include "core/nn/sequential.h"

namespace alloy::test {

// [N, 3, 8, 8] in, [N, 5] out: every layout-aware module (convolution with and without bias,
// batch norm with its fused ReLU and the residual block's masked one, both pools) between the
// boundaries, and a 2x2 image at LeaveLayout so that it permutes.
// Weights N(0, 0.3) from `seed` (batch norms at 1 and 0), the same for every call with it.
inline std::unique_ptr<nn::Sequential> layout_net(std::uint64_t seed) {
  auto net = std::make_unique<nn::Sequential>();
  net->add("enter_layout", std::make_unique<nn::EnterLayout>());
  net->add("conv", std::make_unique<nn::Conv2d>(3, 8, 3, 1, 1, true));
  net->add("bn", std::make_unique<nn::BatchNorm2d>(8, 0.1f, 1e-5f, /*fuse_relu=*/true));
  net->add("block", std::make_unique<nn::ResidualBlock>(8, 16, 2));
  net->add("maxpool", std::make_unique<nn::MaxPool2d>(2, 1, 0));
  net->add("avgpool", std::make_unique<nn::AvgPool2d>(2, 1, 0));
  net->add("leave_layout", std::make_unique<nn::LeaveLayout>());
  net->add("flatten", std::make_unique<nn::Flatten>());
  net->add("fc", std::make_unique<nn::Linear>(16 * 2 * 2, 5));
  Generator generator(seed);
  for (nn::Parameter* parameter : net->parameters()) {
    if (!parameter->is_norm) models::init_normal(parameter->value, 0.3, generator);
  }
  return net;
}

struct Run {
  Tensor y, dx;
  std::vector<Tensor> grads, buffers;
};

inline Run run_step(nn::Module& net, const Tensor& x, const Tensor& dy) {
  net.zero_grad();
  Run result;
  result.y = net.forward(x);
  result.dx = net.backward(dy);
  for (nn::Parameter* p : net.parameters())
    result.grads.push_back(p->grad.clone());
  for (nn::Buffer* b : net.buffers())
    result.buffers.push_back(b->value.clone());
  return result;
}

}  // namespace alloy::test
