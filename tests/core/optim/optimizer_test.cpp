// The optimizers' step count and learning rate, which live with the parameters: a step that
// found_inf skips is not counted (AdamW's bias correction after it is the one before it, as in
// Apex and PyTorch's GradScaler), set_lr changes the following updates, and a count and state
// restored into a fresh optimizer (what a checkpoint does) continue bit for bit.
#include "core/optim/optimizer.h"

#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/random.h"
#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

// Parameters of mixed sizes, one of them half (as at O3).
std::vector<std::unique_ptr<nn::Parameter>> make_params(std::uint64_t seed) {
  Generator generator(seed);
  const std::int64_t sizes[] = {10, 50001, 129, 3};
  const DType types[] = {DType::f32, DType::f32, DType::f16, DType::f32};
  std::vector<std::unique_ptr<nn::Parameter>> params;
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    auto p = std::make_unique<nn::Parameter>();
    p->name = "p" + std::to_string(i);
    p->value = random_tensor({sizes[i]}, types[i], generator);
    params.push_back(std::move(p));
  }
  return params;
}

std::vector<std::unique_ptr<nn::Parameter>> clone_params(
    const std::vector<std::unique_ptr<nn::Parameter>>& params) {
  std::vector<std::unique_ptr<nn::Parameter>> copy;
  for (const auto& p : params) {
    auto c = std::make_unique<nn::Parameter>();
    c->name = p->name;
    c->value = p->value.clone();
    copy.push_back(std::move(c));
  }
  return copy;
}

std::vector<nn::Parameter*> pointers(const std::vector<std::unique_ptr<nn::Parameter>>& params) {
  std::vector<nn::Parameter*> out;
  for (const auto& p : params)
    out.push_back(p.get());
  return out;
}

// The same gradients (seeded) for every set of parameters; f16 and f32 by turns.
void set_gradients(const std::vector<std::unique_ptr<nn::Parameter>>& params, std::uint64_t seed) {
  Generator generator(seed);
  for (std::size_t i = 0; i < params.size(); ++i) {
    params[i]->grad = random_tensor(params[i]->value.shape(), i % 2 ? DType::f16 : DType::f32,
                                    generator, -100.0f, 100.0f);
  }
}

std::vector<std::uint16_t> bytes_of(const Tensor& tensor) {
  std::vector<std::uint16_t> out(tensor.nbytes() / 2);
  std::memcpy(out.data(), tensor.raw(), tensor.nbytes());
  return out;
}

bool same_bits(const std::vector<std::unique_ptr<nn::Parameter>>& a, optim::Optimizer& oa,
               const std::vector<std::unique_ptr<nn::Parameter>>& b, optim::Optimizer& ob) {
  bool same = true;
  for (std::size_t i = 0; i < a.size(); ++i)
    same &= bytes_of(a[i]->value) == bytes_of(b[i]->value);
  const auto state_a = oa.state(), state_b = ob.state();
  for (std::size_t i = 0; i < state_a.size(); ++i)
    same &= bytes_of(*state_a[i].value) == bytes_of(*state_b[i].value);
  return same;
}

optim::OptimizerConfig adamw_config() {
  optim::OptimizerConfig config;
  config.kind = "adamw";
  config.lr = 1e-2f;
  config.beta1 = 0.8f;
  config.beta2 = 0.9f;  // a bias correction that still changes visibly at t = 2, 3
  config.weight_decay = 0.1f;
  return config;
}

optim::OptimizerConfig sgd_config() {
  optim::OptimizerConfig config;
  config.lr = 1e-3f;
  config.momentum = 0.9f;
  config.nesterov = true;
  config.weight_decay = 1e-4f;
  return config;
}

// found_inf values.
Tensor clean() {
  return Tensor::from_floats({1}, {0.0f});
}
Tensor overflow() {
  return Tensor::from_floats({1}, {1.0f});
}

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(optimizer, TwoThreads)

BOOST_AUTO_TEST_CASE(adamw_after_a_skipped_step_has_the_count_and_bias_correction_before_it) {
  // A: steps 1, 2 (skipped), 3. B: steps 1 and 3. C: as A, but counting the skipped step.
  const auto a = make_params(1);
  const auto b = clone_params(a);
  const auto c = clone_params(a);
  const auto opt_a = optim::make_optimizer(adamw_config(), pointers(a));
  const auto opt_b = optim::make_optimizer(adamw_config(), pointers(b));
  const auto opt_c = optim::make_optimizer(adamw_config(), pointers(c));
  const auto all = [&](std::uint64_t seed) {
    set_gradients(a, seed);
    set_gradients(b, seed);
    set_gradients(c, seed);
  };

  all(11);
  opt_a->step(0.01f, clean());
  opt_b->step(0.01f, clean());
  opt_c->step(0.01f, clean());
  BOOST_TEST(opt_a->steps() == 1);

  set_gradients(a, 12);
  a[0]->grad.data<float>()[7] = std::numeric_limits<float>::infinity();
  opt_a->step(0.01f, overflow());
  BOOST_TEST(opt_a->steps() == 1);  // the skipped step did not count
  opt_c->set_steps(2);

  all(13);
  opt_a->step(0.01f, clean());
  opt_b->step(0.01f, clean());
  opt_c->step(0.01f, clean());
  BOOST_TEST(opt_a->steps() == 2);
  BOOST_TEST(opt_b->steps() == 2);
  BOOST_TEST(same_bits(a, *opt_a, b, *opt_b));
  // The comparison can fail: with the skipped step counted (t = 3) the result differs.
  BOOST_TEST(!same_bits(a, *opt_a, c, *opt_c));
}

BOOST_AUTO_TEST_CASE(sgd_counts_the_updates_it_applies) {
  const auto params = make_params(2);
  const auto opt = optim::make_optimizer(sgd_config(), pointers(params));
  BOOST_TEST(opt->steps() == 0);
  set_gradients(params, 21);
  opt->step();
  opt->step(1.0f, clean());
  BOOST_TEST(opt->steps() == 2);
  opt->step(1.0f, overflow());
  BOOST_TEST(opt->steps() == 2);
}

// O2's model weights written by the update: each f32 parameter given a copy gets its new value
// rounded to the copy's dtype, bit for bit a cast of it, and a skipped step writes nothing.
BOOST_AUTO_TEST_CASE(copies_receive_the_updated_parameters_rounded) {
  for (const char* kind : {"sgd", "adamw"}) {
    BOOST_TEST_CONTEXT(kind) {
      const auto params = make_params(4);
      const auto opt = optim::make_optimizer(
          std::string(kind) == "sgd" ? sgd_config() : adamw_config(), pointers(params));
      // Copies for the f32 parameters 0 and 1; none for the half parameter 2 nor for 3.
      Tensor copy0 = Tensor::zeros(params[0]->value.shape(), DType::f16);
      Tensor copy1 = Tensor::zeros(params[1]->value.shape(), DType::bf16);
      opt->write_copies_to({&copy0, &copy1, nullptr, nullptr});
      set_gradients(params, 41);
      opt->step(1.0f, clean());
      const auto rounded = [](const Tensor& value, DType dtype) {
        return Tensor::from_floats(value.shape(), value.to_floats(), dtype);
      };
      BOOST_TEST((bytes_of(copy0) == bytes_of(rounded(params[0]->value, DType::f16))));
      BOOST_TEST((bytes_of(copy1) == bytes_of(rounded(params[1]->value, DType::bf16))));
      const std::vector<std::uint16_t> before = bytes_of(copy0);
      set_gradients(params, 42);
      opt->step(1.0f, overflow());
      BOOST_TEST((bytes_of(copy0) == before), "a skipped step writes no copy");
    }
  }
}

BOOST_AUTO_TEST_CASE(copies_must_match_their_f32_parameters) {
  const auto params = make_params(5);
  const auto opt = optim::make_optimizer(sgd_config(), pointers(params));
  Tensor half = Tensor::zeros(params[2]->value.shape(), DType::bf16);
  Tensor wrong_shape = Tensor::zeros({7}, DType::f16);
  BOOST_CHECK_THROW(opt->write_copies_to({nullptr}), Error);  // one per parameter
  BOOST_CHECK_THROW(opt->write_copies_to({nullptr, nullptr, &half, nullptr}), Error);  // of f16
  BOOST_CHECK_THROW(opt->write_copies_to({&wrong_shape, nullptr, nullptr, nullptr}), Error);
}

BOOST_AUTO_TEST_CASE(set_lr_changes_the_following_updates) {
  // A: a step at 1e-3, then set_lr(2e-4) and another. B: the same steps, the second by a
  // fresh optimizer built with 2e-4 (its momentum copied over). C keeps 1e-3 throughout.
  for (const optim::OptimizerConfig& config : {sgd_config(), adamw_config()}) {
    const auto a = make_params(3);
    const auto b = clone_params(a);
    const auto c = clone_params(a);
    const auto opt_a = optim::make_optimizer(config, pointers(a));
    const auto opt_b = optim::make_optimizer(config, pointers(b));
    const auto opt_c = optim::make_optimizer(config, pointers(c));
    set_gradients(a, 31);
    set_gradients(b, 31);
    set_gradients(c, 31);
    opt_a->step();
    opt_b->step();
    opt_c->step();

    opt_a->set_lr(2e-4f);
    BOOST_TEST(opt_a->config().lr == 2e-4f);
    optim::OptimizerConfig slower = config;
    slower.lr = 2e-4f;
    const auto opt_b2 = optim::make_optimizer(slower, pointers(b));
    const auto from = opt_b->state(), to = opt_b2->state();
    for (std::size_t i = 0; i < from.size(); ++i)
      to[i].value->copy_from(*from[i].value);
    opt_b2->set_steps(opt_b->steps());

    set_gradients(a, 32);
    set_gradients(b, 32);
    set_gradients(c, 32);
    opt_a->step();
    opt_b2->step();
    opt_c->step();
    BOOST_TEST(same_bits(a, *opt_a, b, *opt_b2), config.kind);
    BOOST_TEST(!same_bits(a, *opt_a, c, *opt_c), config.kind);
  }
}

BOOST_AUTO_TEST_CASE(a_restored_count_and_state_continue_bit_for_bit) {
  // What a checkpoint saves (steps(), state(), the weights) restored into a fresh optimizer.
  const auto a = make_params(4);
  const auto opt_a = optim::make_optimizer(adamw_config(), pointers(a));
  set_gradients(a, 41);
  opt_a->step(0.5f, clean());
  set_gradients(a, 42);
  opt_a->step(0.5f, overflow());
  set_gradients(a, 43);
  opt_a->step(0.5f, clean());

  const auto b = clone_params(a);
  const auto opt_b = optim::make_optimizer(adamw_config(), pointers(b));
  const auto from = opt_a->state(), to = opt_b->state();
  for (std::size_t i = 0; i < from.size(); ++i)
    to[i].value->copy_from(*from[i].value);
  opt_b->set_steps(opt_a->steps());
  BOOST_TEST(opt_b->steps() == 2);

  for (std::uint64_t seed = 44; seed < 46; ++seed) {
    set_gradients(a, seed);
    set_gradients(b, seed);
    opt_a->step(0.5f, clean());
    opt_b->step(0.5f, clean());
  }
  BOOST_TEST(opt_b->steps() == 4);
  BOOST_TEST(same_bits(a, *opt_a, b, *opt_b));
}

BOOST_AUTO_TEST_CASE(counts_beyond_float_precision_round_trip) {
  const auto params = make_params(5);
  const auto opt = optim::make_optimizer(adamw_config(), pointers(params));
  opt->set_steps(16777217);  // 2^24 + 1: not a float
  BOOST_TEST(opt->steps() == 16777217);
  set_gradients(params, 51);
  opt->step();
  BOOST_TEST(opt->steps() == 16777218);
}

BOOST_AUTO_TEST_CASE(rejects_bad_rates_and_counts) {
  const auto params = make_params(6);
  const auto opt = optim::make_optimizer(sgd_config(), pointers(params));
  BOOST_CHECK_THROW(opt->set_lr(0.0f), UsageError);
  BOOST_CHECK_THROW(opt->set_lr(std::numeric_limits<float>::quiet_NaN()), UsageError);
  BOOST_TEST(opt->config().lr == sgd_config().lr);
  BOOST_CHECK_THROW(opt->set_steps(-1), Error);
  BOOST_CHECK_THROW(opt->set_steps(std::int64_t{1} << 31), Error);
  BOOST_TEST(opt->steps() == 0);
  optim::OptimizerConfig bad = adamw_config();
  bad.lr = -1.0f;
  BOOST_CHECK_THROW(optim::make_optimizer(bad, pointers(params)), UsageError);
}

BOOST_AUTO_TEST_SUITE_END()
