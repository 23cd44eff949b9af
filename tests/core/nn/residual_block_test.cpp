// The fused ReLUs (BatchNorm2d's fuse_relu, add_relu_forward and the masked backwards) against
// the unfused composition they replaced, conv -> bn -> relu -> conv -> bn -> add -> relu with
// relu_backward and add in the backward: bitwise equal outputs, input gradients, parameter
// gradients and running statistics in f32, f16 and bf16 and under the O1 cast policy, with the
// same parameter names and grad-ready order.
#include "core/nn/residual_block.h"

#include <boost/test/unit_test.hpp>
#include <memory>
#include <string>
#include <vector>

#include "core/models/zoo.h"
#include "core/nn/cast_policy.h"
#include "core/nn/input_dtype.h"
#include "core/nn/relu.h"
#include "core/ops/elementwise.h"
#include "core/ops/relu.h"
#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

// ResidualBlock before the fusion, verbatim: the reference composition of the unfused ops.
class UnfusedBlock : public nn::Module {
 public:
  UnfusedBlock(int in_channels, int out_channels, int stride)
      : conv1_(register_module(
            "conv1", std::make_unique<nn::Conv2d>(in_channels, out_channels, 3, stride, 1, false))),
        bn1_(register_module("bn1", std::make_unique<nn::BatchNorm2d>(out_channels))),
        conv2_(register_module(
            "conv2", std::make_unique<nn::Conv2d>(out_channels, out_channels, 3, 1, 1, false))),
        bn2_(register_module("bn2", std::make_unique<nn::BatchNorm2d>(out_channels))) {
    if (stride != 1 || in_channels != out_channels) {
      auto shortcut = std::make_unique<nn::Sequential>();
      shortcut->emplace<nn::Conv2d>(in_channels, out_channels, 1, stride, 0, false);
      shortcut->emplace<nn::BatchNorm2d>(out_channels);
      shortcut_ = &register_module("shortcut", std::move(shortcut));
    }
  }

  Tensor forward(const Tensor& x) override {
    Tensor hidden = relu_forward(bn1_.forward(conv1_.forward(x)));
    const Tensor branch = bn2_.forward(conv2_.forward(hidden));
    const Tensor skip = shortcut_ ? shortcut_->forward(x) : x;
    const DType sum_dtype = nn::compute_dtype(nn::OpClass::promote, branch.dtype(), skip.dtype());
    Tensor y = relu_forward(add(nn::in_dtype(branch, sum_dtype), nn::in_dtype(skip, sum_dtype)));
    input_dtype_ = x.dtype();
    hidden_ = training() ? std::move(hidden) : Tensor();
    y_ = training() ? y : Tensor();
    return y;
  }

  Tensor backward(const Tensor& dy) override {
    const Tensor d_sum = relu_backward(y_, dy);
    y_ = Tensor();
    Tensor d_skip;
    if (shortcut_) {
      shortcut_->set_needs_input_grad(needs_input_grad());
      d_skip = shortcut_->backward(d_sum);
    } else if (needs_input_grad()) {
      d_skip = nn::in_dtype(d_sum, input_dtype_);
    }
    Tensor d_hidden = conv2_.backward(bn2_.backward(d_sum));
    d_hidden = relu_backward(hidden_, d_hidden);
    hidden_ = Tensor();
    conv1_.set_needs_input_grad(needs_input_grad());
    const Tensor d_main = conv1_.backward(bn1_.backward(d_hidden));
    return needs_input_grad() ? add(d_main, d_skip) : Tensor();
  }

  std::string type_name() const override { return "UnfusedBlock"; }

 private:
  nn::Conv2d& conv1_;
  nn::BatchNorm2d& bn1_;
  nn::Conv2d& conv2_;
  nn::BatchNorm2d& bn2_;
  nn::Sequential* shortcut_ = nullptr;
  Tensor hidden_, y_;
  DType input_dtype_ = DType::f32;
};

// resnet18's stem before the fusion: conv, bn, relu as three modules.
std::unique_ptr<nn::Sequential> unfused_stem() {
  auto net = std::make_unique<nn::Sequential>();
  net->add("conv1", std::make_unique<nn::Conv2d>(1, 8, 3, 1, 1, false));
  net->add("bn1", std::make_unique<nn::BatchNorm2d>(8));
  net->add("relu", std::make_unique<nn::ReLU>());
  return net;
}

std::unique_ptr<nn::Sequential> fused_stem() {
  auto net = std::make_unique<nn::Sequential>();
  net->add("conv1", std::make_unique<nn::Conv2d>(1, 8, 3, 1, 1, false));
  net->add("bn1", std::make_unique<nn::BatchNorm2d>(8, 0.1f, 1e-5f, true));
  return net;
}

std::vector<std::string> names(nn::Module& module) {
  std::vector<std::string> out;
  for (const nn::Parameter* p : module.parameters())
    out.push_back(p->name);
  for (const nn::Buffer* b : module.buffers())
    out.push_back(b->name);
  return out;
}

// How a level sets up the modules: model dtype, O1 policy, input dtype.
struct Level {
  std::string name;
  DType model = DType::f32;  // f32, or the half type of O2/O3
  bool keep_norm_fp32 = false;
  bool o1 = false;
  DType half = DType::f16;
  DType input = DType::f32;
};

std::vector<Level> levels() {
  std::vector<Level> out;
  out.push_back({"O0", DType::f32, false, false, DType::f16, DType::f32});
  for (const DType half : {DType::f16, DType::bf16}) {
    const std::string h = dtype_name(half);
    out.push_back({"O1 " + h + " f32 input", DType::f32, false, true, half, DType::f32});
    out.push_back({"O1 " + h + " half input", DType::f32, false, true, half, half});
    out.push_back({"O2 " + h, half, true, false, half, half});
    out.push_back({"O3 " + h, half, false, false, half, half});
  }
  return out;
}

struct ScopedPolicy {
  explicit ScopedPolicy(const Level& level) { nn::set_cast_policy({level.o1, level.half}); }
  ~ScopedPolicy() {
    nn::clear_weight_cast_cache();
    nn::set_cast_policy({});
  }
};

// Random parameters (batch-norm weights around 1, biases around 0, so both signs reach every
// ReLU) and statistics, the same in both modules; then the level's dtypes.
void prepare(nn::Module& fused, nn::Module& reference, const Level& level, Generator& generator) {
  BOOST_TEST_REQUIRE(names(fused) == names(reference), "same parameter and buffer names");
  const auto fp = fused.parameters(), rp = reference.parameters();
  for (std::size_t i = 0; i < fp.size(); ++i) {
    const bool norm_weight = fp[i]->is_norm && fp[i]->name.find("weight") != std::string::npos;
    const float centre = norm_weight ? 1.0f : 0.0f;
    const Tensor value =
        random_tensor(fp[i]->value.shape(), DType::f32, generator, centre - 0.5f, centre + 0.5f);
    fp[i]->value.copy_from(value);
    rp[i]->value.copy_from(value);
  }
  const auto fb = fused.buffers(), rb = reference.buffers();
  for (std::size_t i = 0; i < fb.size(); ++i) {
    const Tensor value = random_tensor(fb[i]->value.shape(), DType::f32, generator, 0.5f, 1.5f);
    fb[i]->value.copy_from(value);
    rb[i]->value.copy_from(value);
  }
  if (level.model != DType::f32) {
    fused.cast_parameters(level.model, level.keep_norm_fp32);
    reference.cast_parameters(level.model, level.keep_norm_fp32);
  }
}

// Training forward and backward (twice, so gradients accumulate), then an evaluation forward,
// of both modules on the same data: every result bitwise equal.
void check_same_bits(nn::Module& fused, nn::Module& reference, const Level& level,
                     const Shape& input_shape, bool needs_input_grad, Generator& generator,
                     const std::string& what) {
  const ScopedPolicy policy(level);
  prepare(fused, reference, level, generator);
  fused.set_needs_input_grad(needs_input_grad);
  reference.set_needs_input_grad(needs_input_grad);
  fused.zero_grad();
  reference.zero_grad();
  std::vector<std::string> fused_order, reference_order;
  fused.set_grad_ready_hook([&](nn::Parameter& p) { fused_order.push_back(p.name); });
  reference.set_grad_ready_hook([&](nn::Parameter& p) { reference_order.push_back(p.name); });

  for (int step = 0; step < 2; ++step) {
    const std::string at = what + " step " + std::to_string(step);
    const Tensor x = random_tensor(input_shape, level.input, generator, -2.0f, 2.0f);
    const Tensor y = fused.forward(x);
    const Tensor y_reference = reference.forward(x);
    BOOST_TEST_REQUIRE(same_bits(y, y_reference), "forward y " << at);
    const Tensor dy = random_tensor(y.shape(), y.dtype(), generator);
    BOOST_TEST(same_bits(fused.backward(dy), reference.backward(dy)), "dx " << at);
  }
  BOOST_TEST(fused_order == reference_order, "grad-ready order " << what);
  const auto fp = fused.parameters(), rp = reference.parameters();
  for (std::size_t i = 0; i < fp.size(); ++i)
    BOOST_TEST(same_bits(fp[i]->grad, rp[i]->grad), "grad of " << fp[i]->name << " " << what);
  const auto fb = fused.buffers(), rb = reference.buffers();
  for (std::size_t i = 0; i < fb.size(); ++i)
    BOOST_TEST(same_bits(fb[i]->value, rb[i]->value), fb[i]->name << " " << what);

  fused.set_training(false);
  reference.set_training(false);
  const Tensor x = random_tensor(input_shape, level.input, generator, -2.0f, 2.0f);
  BOOST_TEST(same_bits(fused.forward(x), reference.forward(x)), "eval y " << what);
  fused.set_training(true);
  reference.set_training(true);
}

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(residual_block, TwoThreads)

BOOST_AUTO_TEST_CASE(fused_block_is_bitwise_the_unfused_composition) {
  Generator generator(11);
  struct Config {
    int in, out, stride;
  };
  // The identity shortcut, and the projection (strided 1x1 conv + batch norm).
  for (const Config config : {Config{4, 4, 1}, Config{4, 6, 2}}) {
    for (const Level& level : levels()) {
      for (const bool needs_input_grad : {true, false}) {
        const std::string what = level.name + " block " + std::to_string(config.in) + "->" +
                                 std::to_string(config.out) + (needs_input_grad ? "" : " no dx");
        nn::ResidualBlock fused(config.in, config.out, config.stride);
        UnfusedBlock reference(config.in, config.out, config.stride);
        check_same_bits(fused, reference, level, {3, config.in, 8, 8}, needs_input_grad, generator,
                        what);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(fused_stem_is_bitwise_conv_bn_relu) {
  Generator generator(12);
  for (const Level& level : levels()) {
    const auto fused = fused_stem();
    const auto reference = unfused_stem();
    check_same_bits(*fused, *reference, level, {3, 1, 10, 10}, true, generator,
                    level.name + " stem");
  }
}

// The fusion changed no names: checkpoints and the grad-ready order see the same model.
BOOST_AUTO_TEST_CASE(resnet18_keeps_its_parameter_and_buffer_names) {
  Generator generator(13);
  const auto model = models::make_resnet(18, generator, 10, {});
  auto reference = unfused_stem();
  // The unfused stem had 8 channels here; the names are what matters.
  std::vector<std::string> expected = names(*reference);
  int in_channels = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int width = 64 << stage;
    for (int block = 0; block < 2; ++block) {
      UnfusedBlock unfused(block == 0 ? in_channels : width, width,
                           block == 0 && stage > 0 ? 2 : 1);
      for (const std::string& name : names(unfused)) {
        expected.push_back("layer" + std::to_string(stage + 1) + "." + std::to_string(block) + "." +
                           name);
      }
    }
    in_channels = width;
  }
  expected.insert(expected.end(), {"fc.weight", "fc.bias"});
  // names() lists parameters, then buffers, per module: compare each kind in order.
  std::vector<std::string> expected_params, expected_buffers, actual_params, actual_buffers;
  for (const std::string& name : expected) {
    const bool buffer = name.find("running_") != std::string::npos;
    (buffer ? expected_buffers : expected_params).push_back(name);
  }
  for (const nn::Parameter* p : model->parameters())
    actual_params.push_back(p->name);
  for (const nn::Buffer* b : model->buffers())
    actual_buffers.push_back(b->name);
  BOOST_TEST(actual_params == expected_params, boost::test_tools::per_element());
  BOOST_TEST(actual_buffers == expected_buffers, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
