// Gradient accumulation in the training step (apps/train/train_step.h): one step over a batch in N
// micro-batches takes the step one pass over the batch takes, within fp32 rounding at O0, and
// not the step of a wrong scaling (micro-batch means summed without the 1/N); the tally adds
// up the same loss; an uneven batch is split as apps/train/micro_batches.h says; and under the
// dynamic loss scaler an overflow in any one micro-batch skips the whole step and halves the
// scale once.
#include "apps/train/train_step.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/train/micro_batches.h"
#include "core/data/synthetic.h"
#include "core/digest.h"
#include "core/models/models.h"
#include "core/nn/cast_policy.h"
#include "core/nn/sequential.h"
#include "core/ops/step_tally.h"
#include "core/random.h"
#include "core/thread_pool.h"
#include "tests/apps/step_checks.h"

using namespace alloy;
using namespace alloy::app;
using alloy::test::update_difference;

namespace {

// Identity forward; its backward puts an inf into the incoming gradient of the `poisoned`-th
// backward (0-based) since construction, as an overflow in that micro-batch's loss would.
class PoisonBackward : public nn::Module {
 public:
  explicit PoisonBackward(int poisoned) : poisoned_(poisoned) {}
  Tensor forward(const Tensor& x) override { return x; }
  Tensor backward(const Tensor& dy) override {
    if (backwards_++ != poisoned_) return dy;
    Tensor poisoned = dy.clone();
    if (poisoned.dtype() == DType::f32) {
      poisoned.data<float>()[0] = std::numeric_limits<float>::infinity();
    } else {
      poisoned.half_data()[0] = poisoned.dtype() == DType::f16 ? 0x7c00 : 0x7f80;  // +inf
    }
    return poisoned;
  }
  std::string type_name() const override { return "PoisonBackward"; }

 private:
  int poisoned_;
  int backwards_ = 0;
};

// A model, its amp layer and a tally: what one Trainer holds for the step.
struct Setup {
  Setup(amp::OptLevel level, float lr, int poisoned_backward = -1,
        std::optional<float> init_scale = std::nullopt) {
    Generator generator(11);
    auto net = std::make_unique<nn::Sequential>();
    net->add("net", models::make_model("mlp", generator, 10));
    net->add("poison", std::make_unique<PoisonBackward>(poisoned_backward));
    net->set_needs_input_grad(false);
    model = std::move(net);
    amp::AmpProperties properties = amp::resolve_properties(level, {});
    if (init_scale) properties.loss_scale.init_scale = *init_scale;
    nn::CastPolicy policy;
    policy.enabled = properties.cast_policy;
    policy.half_dtype = properties.half_dtype;
    nn::set_cast_policy(policy);
    optim::OptimizerConfig optimizer;
    optimizer.lr = lr;
    precision = std::make_unique<amp::MixedPrecision>(properties, *model, optimizer);
    tally = make_step_tally(Device::cpu());
  }
  ~Setup() { nn::set_cast_policy(nn::CastPolicy{}); }

  std::vector<float> weights() {
    std::vector<float> all;
    for (const nn::Parameter* param : precision->canonical_parameters()) {
      const std::vector<float> values = param->value.to_floats();
      all.insert(all.end(), values.begin(), values.end());
    }
    return all;
  }

  std::unique_ptr<nn::Module> model;
  std::unique_ptr<amp::MixedPrecision> precision;
  Tensor tally;
};

struct Batch {
  Tensor images;
  Tensor labels;
};

Batch batch_of(std::int64_t rows) {
  const data::Dataset set = data::make_synthetic_dataset(rows, 3, "train_step_test");
  return {set.images, set.labels};
}

struct StepResult {
  std::vector<float> before;
  std::vector<float> after;
  StepTally tally;
  amp::ScalerSnapshot scaler;
};

StepResult one_step(amp::OptLevel level, std::int64_t rows, std::int64_t accumulation_steps,
                    float lr = 0.1f) {
  Setup setup(level, lr);
  const Batch batch = batch_of(rows);
  StepResult result;
  result.before = setup.weights();
  setup.model->set_training(true);
  train_step(*setup.model, *setup.precision, batch.images, batch.labels, setup.tally, nullptr,
             accumulation_steps);
  result.after = setup.weights();
  result.tally = read_step_tally(setup.tally);
  result.scaler = setup.precision->scaler().snapshot();
  return result;
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(train_step_accumulation, test::OneThread)

BOOST_AUTO_TEST_CASE(four_micro_batches_take_the_step_of_one_pass_at_o0) {
  const StepResult whole = one_step(amp::OptLevel::O0, 64, 1);
  const StepResult split = one_step(amp::OptLevel::O0, 64, 4);
  const double difference = update_difference(split, whole);
  BOOST_TEST_MESSAGE("O0, 64 rows in 4 micro-batches: update within " << difference);
  BOOST_TEST(difference <= 1e-5);
  // Each micro-batch's gradient divided by its own rows sums to 4 times the mean's gradient:
  // the step of 4 times the learning rate. The comparison above tells it apart.
  const StepResult wrong = one_step(amp::OptLevel::O0, 64, 1, 0.4f);
  BOOST_TEST(update_difference(wrong, whole) > 1.0);
  // The tally: the micro-batches' (mean x rows) add up to the step's loss sum.
  BOOST_TEST(split.tally.correct == whole.tally.correct);
  BOOST_TEST(std::abs(split.tally.loss_sum - whole.tally.loss_sum) <=
             1e-5 * std::abs(whole.tally.loss_sum));
  BOOST_TEST(whole.tally.loss_sum > 0);
}

BOOST_AUTO_TEST_CASE(one_micro_batch_is_the_step_without_accumulation_bit_for_bit) {
  // accumulation_steps 1 is the default; more steps than rows leave the empty ones out.
  const StepResult once = one_step(amp::OptLevel::O2, 8, 1);
  for (const std::int64_t steps : {std::int64_t{1}, std::int64_t{3}, std::int64_t{8}}) {
    const StepResult again = one_step(amp::OptLevel::O2, 8, steps);
    if (steps == 1) {
      BOOST_TEST(again.after == once.after, boost::test_tools::per_element());
    } else {
      BOOST_TEST(update_difference(again, once) <= 1e-2, steps << " micro-batches");
    }
  }
}

BOOST_AUTO_TEST_CASE(an_uneven_batch_in_micro_batches_takes_the_step_of_one_pass) {
  // 10 rows in 4: 3, 3, 2, 2 (an epoch's last batch), each divided by the step's 10 rows.
  const StepResult whole = one_step(amp::OptLevel::O0, 10, 1);
  const StepResult split = one_step(amp::OptLevel::O0, 10, 4);
  BOOST_TEST(update_difference(split, whole) <= 1e-5);
  BOOST_TEST(std::abs(split.tally.loss_sum - whole.tally.loss_sum) <=
             1e-5 * std::abs(whole.tally.loss_sum));
}

BOOST_AUTO_TEST_CASE(half_levels_accumulate_within_their_rounding) {
  // O1 accumulates fp32 weight gradients from half operands, O2 and O3 half gradients.
  for (const amp::OptLevel level : {amp::OptLevel::O1, amp::OptLevel::O2, amp::OptLevel::O3}) {
    BOOST_TEST_CONTEXT(amp::opt_level_name(level)) {
      const StepResult whole = one_step(level, 64, 1);
      const StepResult split = one_step(level, 64, 4);
      const double difference = update_difference(split, whole);
      BOOST_TEST_MESSAGE(amp::opt_level_name(level) << ": update within " << difference);
      BOOST_TEST(difference <= 1e-2);
      BOOST_TEST(split.scaler.skipped_steps == 0);
      BOOST_TEST(split.scaler.scale == whole.scaler.scale);
    }
  }
}

BOOST_AUTO_TEST_CASE(an_overflow_in_any_micro_batch_skips_the_step_and_halves_the_scale_once) {
  const Batch batch = batch_of(64);
  // -1: no overflow (the step is taken), 0..3: the overflowing micro-batch.
  for (const int poisoned : {-1, 0, 1, 3}) {
    BOOST_TEST_CONTEXT("overflow in micro-batch " << poisoned) {
      Setup setup(amp::OptLevel::O2, 0.1f, poisoned);
      setup.model->set_training(true);
      const std::string before = params_digest(setup.precision->canonical_parameters());
      const float scale = setup.precision->scaler().snapshot().scale;
      train_step(*setup.model, *setup.precision, batch.images, batch.labels, setup.tally, nullptr,
                 4);
      const amp::ScalerSnapshot after = setup.precision->scaler().snapshot();
      const bool changed = params_digest(setup.precision->canonical_parameters()) != before;
      if (poisoned < 0) {
        BOOST_TEST(changed);
        BOOST_TEST(after.scale == scale);
        BOOST_TEST(after.skipped_steps == 0);
      } else {
        BOOST_TEST(!changed, "the weights moved");
        BOOST_TEST(after.scale == scale / 2);
        BOOST_TEST(after.skipped_steps == 1);
      }
      // The next step starts from zero gradients: it is taken.
      train_step(*setup.model, *setup.precision, batch.images, batch.labels, setup.tally, nullptr,
                 4);
      BOOST_TEST(setup.precision->scaler().snapshot().skipped_steps == after.skipped_steps);
    }
  }
  // A scale every micro-batch overflows with: still one skip and one halving.
  Setup setup(amp::OptLevel::O2, 0.1f, -1, 1e30f);
  setup.model->set_training(true);
  train_step(*setup.model, *setup.precision, batch.images, batch.labels, setup.tally, nullptr, 4);
  const amp::ScalerSnapshot after = setup.precision->scaler().snapshot();
  BOOST_TEST(after.skipped_steps == 1);
  BOOST_TEST(after.scale == 1e30f / 2);
}

BOOST_AUTO_TEST_SUITE_END()
