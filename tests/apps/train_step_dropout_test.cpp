// Dropout in the training step (apps/train/train_step.h sets each micro-batch's DropoutStream): a
// step in 4 micro-batches draws one pass's masks (its update within fp32 rounding of one pass's,
// while another dropout key moves the weights elsewhere); a Trainer run stopped after an epoch
// and resumed from its captured state ends with the straight run's bits; a model with dropout
// outside train_step without a stream fails saying where to run it.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "apps/train/train_step.h"
#include "apps/train/trainer.h"
#include "apps/train/training_state.h"
#include "core/data/synthetic.h"
#include "core/models/init.h"
#include "core/models/models.h"
#include "core/nn/dropout.h"
#include "core/nn/flatten.h"
#include "core/nn/linear.h"
#include "core/nn/relu.h"
#include "core/nn/sequential.h"
#include "core/ops/step_tally.h"
#include "tests/apps/step_checks.h"

using namespace alloy;
using namespace alloy::app;

namespace {

// Flatten, Linear 784 -> 32, ReLU, Dropout(0.5), Linear 32 -> 10; weights from `generator`,
// the dropout key from `dropout_keys`.
std::unique_ptr<nn::Module> make_dropout_mlp(Generator& generator, Generator& dropout_keys) {
  auto net = std::make_unique<nn::Sequential>();
  net->emplace<nn::Flatten>();
  net->emplace<nn::Linear>(784, 32);
  net->emplace<nn::ReLU>();
  net->emplace<nn::Dropout>(0.5f, dropout_keys);
  net->emplace<nn::Linear>(32, 10);
  for (nn::Parameter* param : net->parameters())
    models::init_normal(param->value, 0.05, generator);
  net->set_needs_input_grad(false);
  return net;
}

struct Run {
  std::vector<float> before, after;
};

std::vector<float> weights(amp::MixedPrecision& precision) {
  std::vector<float> all;
  for (const nn::Parameter* param : precision.canonical_parameters()) {
    const std::vector<float> values = param->value.to_floats();
    all.insert(all.end(), values.begin(), values.end());
  }
  return all;
}

// Three O0 steps over 32 synthetic rows each, in `accumulation_steps` micro-batches.
Run three_steps(std::int64_t accumulation_steps, std::uint64_t dropout_seed) {
  Generator generator(11), dropout_keys(dropout_seed);
  const std::unique_ptr<nn::Module> model = make_dropout_mlp(generator, dropout_keys);
  optim::OptimizerConfig optimizer;
  optimizer.lr = 0.5f;
  amp::MixedPrecision precision(amp::resolve_properties(amp::OptLevel::O0, {}), *model, optimizer);
  Tensor tally = make_step_tally(Device::cpu());
  model->set_training(true);
  Run run;
  run.before = weights(precision);
  for (int step = 0; step < 3; ++step) {
    const data::Dataset batch =
        data::make_synthetic_dataset(32, 5 + step, "train_step_dropout_test");
    train_step(*model, precision, batch.images, batch.labels, tally, nullptr, accumulation_steps);
  }
  run.after = weights(precision);
  return run;
}

const std::string& dropout_mlp() {
  static const std::string name = [] {
    models::register_model("train_step_dropout_mlp", [](Generator& generator, int) {
      return make_dropout_mlp(generator, generator);
    });
    return std::string("train_step_dropout_mlp");
  }();
  return name;
}

TrainConfig trainer_options() {
  TrainConfig o;
  o.model = dropout_mlp();
  o.dataset = "synthetic";
  o.epochs = 2;
  o.batch_size = 16;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.threads = 1;
  o.precision = amp::resolve_properties(amp::OptLevel::O2, {});
  return o;
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(train_step_dropout, test::OneThread)

BOOST_AUTO_TEST_CASE(micro_batches_draw_the_masks_of_one_pass) {
  const Run whole = three_steps(1, 3);
  const Run split = three_steps(4, 3);
  const double difference = test::update_difference(split, whole);
  BOOST_TEST_MESSAGE("3 steps of 32 rows in 4 micro-batches: updates within " << difference);
  BOOST_TEST(difference <= 1e-5);
  // Other masks (another layer key) train elsewhere: the comparison above can tell.
  const double other_key = test::update_difference(three_steps(1, 4), whole);
  BOOST_TEST_MESSAGE("another dropout key: updates differ by " << other_key);
  BOOST_TEST(other_key > 1e-2);
}

BOOST_AUTO_TEST_CASE(a_resumed_trainer_run_ends_with_the_straight_runs_bits) {
  app::Trainer straight(trainer_options(), Device::cpu(), test::small_synthetic_data());
  TrainObserver quiet;
  straight.run(quiet);

  app::Trainer first(trainer_options(), Device::cpu(), test::small_synthetic_data());
  first.set_epoch_hook([] { return true; });  // stop after the first epoch
  first.run(quiet);
  BOOST_REQUIRE(first.stopped());
  BOOST_TEST(first.params_digest() != straight.params_digest());
  const checkpoint::CheckpointState state = capture_training_state(first);

  app::Trainer resumed(trainer_options(), Device::cpu(), test::small_synthetic_data());
  restore_training_state(resumed, state, "in-memory", [](const std::string&) {});
  resumed.run(quiet);
  BOOST_TEST(resumed.epochs_done() == 2);
  BOOST_TEST(resumed.params_digest() == straight.params_digest());

  TrainConfig reseeded = trainer_options();
  reseeded.seed += 1;
  app::Trainer other(reseeded, Device::cpu(), test::small_synthetic_data());
  other.run(quiet);
  BOOST_TEST(other.params_digest() != straight.params_digest());
}

BOOST_AUTO_TEST_CASE(a_training_forward_outside_the_step_says_where_to_run_it) {
  Generator generator(1), keys(2);
  const std::unique_ptr<nn::Module> model = make_dropout_mlp(generator, keys);
  const Tensor images = Tensor::from_floats({4, 784}, std::vector<float>(4 * 784, 0.5f));
  model->set_training(true);
  BOOST_CHECK_EXCEPTION(model->forward(images), Error, [](const Error& e) {
    return std::string(e.what()).find("app::train_step") != std::string::npos;
  });
  model->set_training(false);
  BOOST_TEST(model->forward(images).shape() == (Shape{4, 10}));
}

BOOST_AUTO_TEST_SUITE_END()
