#include "core/models/init.h"
#include "core/models/zoo.h"
#include "core/nn/dropout.h"
#include "core/nn/flatten.h"
#include "core/nn/gelu.h"
#include "core/nn/layer_norm.h"
#include "core/nn/linear.h"
#include "core/nn/residual.h"
#include "core/nn/sequential.h"

namespace alloy::models {

namespace {

constexpr int kWidth = 256;
constexpr int kHidden = 512;
constexpr int kBlocks = 4;
constexpr float kDropout = 0.1f;

// x + linear(dropout(gelu(linear(layer_norm(x))))): a pre-norm transformer's feed-forward
// sublayer, a block that --recompute blocks recomputes.
std::unique_ptr<nn::Module> feed_forward_block(Generator& generator) {
  auto body = std::make_unique<nn::Sequential>();
  body->emplace<nn::LayerNorm>(kWidth);
  init_linear_default(body->emplace<nn::Linear>(kWidth, kHidden), generator);
  body->emplace<nn::GELU>();
  body->emplace<nn::Dropout>(kDropout, generator);
  init_linear_default(body->emplace<nn::Linear>(kHidden, kWidth), generator);
  return std::make_unique<nn::Residual>(std::move(body));
}

}  // namespace

std::unique_ptr<nn::Module> make_ffn(Generator& generator, int classes) {
  auto net = std::make_unique<nn::Sequential>();
  net->emplace<nn::Flatten>();
  init_linear_default(net->emplace<nn::Linear>(28 * 28, kWidth), generator);
  for (int i = 0; i < kBlocks; ++i)
    net->add(feed_forward_block(generator));
  net->emplace<nn::LayerNorm>(kWidth);
  init_linear_default(net->emplace<nn::Linear>(kWidth, classes), generator);
  return net;
}

}  // namespace alloy::models
