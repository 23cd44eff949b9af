// Gradient accumulation across backward passes (apps/train/train_step.h's micro-batches): a model's
// parameter gradients after two backwards without zero_grad between them are the sum of the
// two backwards' gradients, in every op of the zoo's networks and a small batch-norm ResNet,
// at every opt level's dtypes (fp32; O1's fp32 gradients from half operands; half gradients
// with fp32 or half batch norm), on the CPU and (the GPU test) on CUDA, where the libraries
// must add (cuBLAS and cuDNN with beta 1). Shared by the CPU test and its GPU twin.
#pragma once

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/models/init.h"
#include "core/models/models.h"
#include "core/nn/batch_norm2d.h"
#include "core/nn/cast_policy.h"
#include "core/nn/conv2d.h"
#include "core/nn/flatten.h"
#include "core/nn/linear.h"
#include "core/nn/pool2d.h"
#include "core/nn/residual_block.h"
#include "core/nn/sequential.h"
#include "tests/support/gradcheck.h"

namespace alloy::test {

// How an opt level stores and computes a model (amp/opt_level.h).
struct AccumulationLevel {
  const char* name;
  DType parameters;     // the model's parameter (and gradient) dtype
  bool keep_norm_fp32;  // batch-norm parameters stay fp32 in a half model
  bool cast_policy;     // O1: half compute with fp32 weights
  DType input;
};

inline const AccumulationLevel kAccumulationLevels[] = {
    {"O0", DType::f32, false, false, DType::f32},
    {"O1", DType::f32, false, true, DType::f32},
    {"O2", DType::f16, true, false, DType::f16},
    {"O3", DType::f16, false, false, DType::f16},
    {"O2 bf16", DType::bf16, true, false, DType::bf16},
};

// conv 1->8 stride 2, batch norm + relu, a residual block, a downsampling one (1x1 conv and
// batch norm shortcut), average pool, linear: batch norm and the fused adds where ResNet-18
// has them, small enough for the CUDA emulator.
inline std::unique_ptr<nn::Module> make_small_resnet(Generator& generator) {
  auto net = std::make_unique<nn::Sequential>();
  net->emplace<nn::Conv2d>(1, 8, 3, 2, 1, false);
  net->emplace<nn::BatchNorm2d>(8, 0.1f, 1e-5f, /*fuse_relu=*/true);
  net->emplace<nn::ResidualBlock>(8, 8, 1);
  net->emplace<nn::ResidualBlock>(8, 16, 2);
  net->emplace<nn::AvgPool2d>(7);
  net->emplace<nn::Flatten>();
  net->emplace<nn::Linear>(16, 10);
  for (nn::Parameter* param : net->parameters()) {
    if (!param->is_norm) models::init_normal(param->value, 0.3, generator);
  }
  return net;
}

class CastPolicyScope {
 public:
  explicit CastPolicyScope(const AccumulationLevel& level) {
    nn::CastPolicy policy;
    policy.enabled = level.cast_policy;
    nn::set_cast_policy(policy);
  }
  ~CastPolicyScope() {
    nn::clear_weight_cast_cache();
    nn::set_cast_policy(nn::CastPolicy{});
  }
};

// The gradients of every parameter, as doubles, from the host.
inline std::vector<std::vector<double>> gradients_of(nn::Module& model) {
  std::vector<std::vector<double>> all;
  for (const nn::Parameter* param : model.parameters()) {
    const std::vector<float> values = param->grad.to_floats();
    all.emplace_back(values.begin(), values.end());
  }
  return all;
}

// `place` puts a host tensor where the model lives (the GPU test's to_cuda).
template <class Place>
void check_gradients_accumulate(const std::string& model_name, const AccumulationLevel& level,
                                Device device, std::int64_t rows, const Place& place) {
  const CastPolicyScope scope(level);
  Generator generator(23);
  std::unique_ptr<nn::Module> model = model_name == "small_resnet"
                                          ? make_small_resnet(generator)
                                          : models::make_model(model_name, generator, 10);
  model->set_needs_input_grad(false);
  if (level.parameters != DType::f32)
    model->cast_parameters(level.parameters, level.keep_norm_fp32);
  model->to_device(device);
  model->set_training(true);
  const auto backward = [&](std::uint64_t seed) {
    Generator data(seed);
    const Tensor images = place(random_tensor({rows, 1, 28, 28}, level.input, data));
    const Tensor logits = model->forward(images);
    model->backward(place(random_tensor(logits.shape(), logits.dtype(), data, -0.5f, 0.5f)));
  };
  model->zero_grad();
  backward(1);
  const auto first = gradients_of(*model);
  model->zero_grad();
  backward(2);
  const auto second = gradients_of(*model);
  model->zero_grad();
  backward(1);
  backward(2);  // accumulates onto the first
  const auto both = gradients_of(*model);

  const std::vector<nn::Parameter*> params = model->parameters();
  BOOST_REQUIRE(both.size() == params.size());
  for (std::size_t p = 0; p < params.size(); ++p) {
    const DType dtype = params[p]->grad.dtype();
    // fp32 sums in another order; half gradients rounded once more than the two terms.
    const double rtol = dtype == DType::f32 ? 1e-4 : dtype == DType::f16 ? 4e-3 : 3e-2;
    double largest = 0, first_largest = 0, worst = 0;
    for (std::size_t i = 0; i < both[p].size(); ++i) {
      largest = std::max(largest, std::abs(first[p][i] + second[p][i]));
      first_largest = std::max(first_largest, std::abs(first[p][i]));
    }
    for (std::size_t i = 0; i < both[p].size(); ++i)
      worst = std::max(worst, std::abs(both[p][i] - (first[p][i] + second[p][i])));
    BOOST_TEST_CONTEXT(model_name << " " << level.name << ", " << params[p]->name << " ("
                                  << dtype_name(dtype) << ")") {
      // The first backward's part is far above the tolerance: had the second overwritten it,
      // the check below would fail.
      BOOST_TEST(first_largest > 10 * rtol * largest);
      BOOST_TEST(worst <= rtol * largest, "off by " << worst << " of " << largest);
    }
  }
}

}  // namespace alloy::test
