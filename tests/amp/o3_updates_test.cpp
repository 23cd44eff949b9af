// What round-to-nearest costs O3's fp16 SGD update (no master weights): per parameter, the
// share of elements with a nonzero gradient whose weight does not move because |lr * g| is
// under half an ulp of the weight. The count (tests/support/o3_step.h: lost_updates) must be
// what the optimizer's kernel really leaves unchanged. On the recipe's first steps here; the
// long run that docs/PERFORMANCE.md quotes ("O3 on the GPU") sets ALLOY_O3_STEPS (1000) and
// runs the case recipe_steps_lose_what_the_count_says with --log_level=message.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "apps/train/train_step.h"
#include "core/ops/step_tally.h"
#include "tests/support/o3_step.h"

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(o3_updates)

BOOST_AUTO_TEST_CASE(lost_updates_counts_what_rounding_to_nearest_keeps) {
  // In [1, 2) the fp16 ulp is 2^-10: an update under 2^-11 (4.9e-4) is lost. lr * g: 4e-4
  // (lost), 6e-4 (moves), 0 (not counted); at w = 2^-14 the ulp is 2^-24, and 4e-4 moves it.
  const Tensor w = Tensor::from_floats({4}, {1.5f, 1.5f, 1.5f, 0x1p-14f}, DType::f16);
  const Tensor g = Tensor::from_floats({4}, {0.002f, 0.003f, 0.0f, 0.002f}, DType::f16);
  const LostUpdates counts = lost_updates(w, g, 0.2f);
  BOOST_TEST(counts.nonzero == 3);
  BOOST_TEST(counts.lost == 1);
}

BOOST_AUTO_TEST_CASE(recipe_steps_lose_what_the_count_says) {
  const char* env = std::getenv("ALLOY_O3_STEPS");
  const std::int64_t steps = env != nullptr ? std::atoll(env) : 2;
  const data::Dataset set = recipe_training_set();
  RecipeModel recipe = make_recipe_lenet(amp::OptLevel::O3, Device::cpu());
  Tensor tally = make_step_tally(Device::cpu());
  std::ostringstream table;
  table << "step  parameter      nonzero grads   lost   lost share\n";
  for (std::int64_t step = 1; step <= steps; ++step) {
    const Batch batch = recipe_batch(set, step - 1, Device::cpu());
    if (step != 1 && step != 100 && step != 1000 && step != steps) {
      app::train_step(*recipe.model, *recipe.precision, batch.images, batch.labels, tally);
      continue;
    }
    const StepTrace trace = traced_step(recipe, batch);
    const auto params = recipe.model->parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      const Tensor& before = trace.at(params[i]->name + " before");
      const Tensor& grad = trace.at(params[i]->name + " grad");
      const LostUpdates counts = lost_updates(before, grad, kRecipeLr);
      // What the update kernel left unchanged where the gradient was not zero.
      const std::vector<float> old_w = before.to_floats(), new_w = params[i]->value.to_floats();
      const std::vector<float> g = grad.to_floats();
      std::int64_t unchanged = 0;
      for (std::size_t e = 0; e < g.size(); ++e)
        unchanged += g[e] != 0.0f && old_w[e] == new_w[e];
      BOOST_TEST(unchanged == counts.lost, params[i]->name << " at step " << step);
      table << std::setw(4) << step << "  " << std::left << std::setw(12) << params[i]->name
            << std::right << std::setw(10) << counts.nonzero << "/" << std::setw(6) << g.size()
            << std::setw(7) << counts.lost << std::setw(10) << std::setprecision(3)
            << (counts.nonzero > 0 ? double(counts.lost) / double(counts.nonzero) : 0.0) << "\n";
    }
  }
  BOOST_TEST_MESSAGE("O3 updates lost to round-to-nearest (CPU, lr " << kRecipeLr << "):\n"
                                                                     << table.str());
}

BOOST_AUTO_TEST_SUITE_END()
