// alloy mem for sequence models: the GPT flags parse (and are refused for other models), and a
// measured level's parameters, masters, gradients and AdamW state have the sizes the parameter
// count gives.
#include <boost/test/unit_test.hpp>

#include "apps/cli/memory_report.h"
#include "core/error.h"

using namespace alloy;
using namespace alloy::app;

BOOST_AUTO_TEST_SUITE(lm_memory)

BOOST_AUTO_TEST_CASE(gpt_flags_parse_for_gpt_models_only) {
  const MemOptions o = parse_mem_options(
      {"--model", "gpt-shakespeare", "--batch-size", "2", "--n-layer", "2", "--block-size", "32"});
  BOOST_TEST(o.gpt.n_layer == 2);
  BOOST_TEST(o.gpt.n_head == 6);  // the preset's
  BOOST_TEST(o.gpt.block_size == 32);
  BOOST_TEST(!o.gpt.bias);
  BOOST_CHECK_THROW(parse_mem_options({"--model", "gpt", "--batch-size", "2", "--n-embd", "100",
                                       "--n-head", "3"}),
                    UsageError);
  BOOST_CHECK_THROW(parse_mem_options({"--model", "lenet", "--batch-size", "2", "--n-layer", "2"}),
                    UsageError);
}

BOOST_AUTO_TEST_CASE(levels_hold_the_parameter_count_in_each_category) {
  MeasureConfig config;
  config.model = "gpt";
  config.gpt.n_layer = 2;
  config.gpt.n_head = 2;
  config.gpt.n_embd = 32;
  config.gpt.block_size = 16;
  config.gpt.vocab_size = 50;
  config.batch_size = 3;
  config.steps = 2;
  config.optimizer = mem_optimizer_config("adamw");
  const LevelReport o0 = measure_level(config, level_properties(amp::OptLevel::O0, std::nullopt));
  const std::int64_t count = o0.parameter_count;
  const std::int64_t c = 32;
  BOOST_TEST(count == 50 * c + 16 * c +
                          2 * (4 * c + 3 * c * c + 3 * c + c * c + c + 8 * c * c + 5 * c) + 2 * c);
  BOOST_TEST(o0.bytes(MemoryCategory::parameters) == 4 * count);
  BOOST_TEST(o0.bytes(MemoryCategory::gradients) == 4 * count);
  BOOST_TEST(o0.bytes(MemoryCategory::optimizer_state) >= 8 * count);
  BOOST_TEST(o0.bytes(MemoryCategory::activations) > 0);
  BOOST_TEST(o0.leaked_bytes == 0);
  const LevelReport o2 = measure_level(config, level_properties(amp::OptLevel::O2, std::nullopt));
  BOOST_TEST(o2.bytes(MemoryCategory::master_parameters) >= 4 * count - 4 * 10 * c);
  BOOST_TEST(o2.bytes(MemoryCategory::parameters) < o0.bytes(MemoryCategory::parameters));
  // Half gradients where there are masters, fp32 ones of the layer norms: no fp32 master
  // gradients beside them.
  const std::int64_t mastered = o2.bytes(MemoryCategory::master_parameters) / 4;
  BOOST_TEST(o2.bytes(MemoryCategory::gradients) == 2 * mastered + 4 * (count - mastered));
  BOOST_TEST(o2.leaked_bytes == 0);
}

BOOST_AUTO_TEST_SUITE_END()
