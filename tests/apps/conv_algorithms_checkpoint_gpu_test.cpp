// --conv-algorithms measured through a checkpoint (apps/train/training_state.cpp): a checkpoint
// keeps the cuDNN algorithms the run measured (RunRecord::conv_algorithms, the algorithm db's
// lines), and a resume loads them before its first step, on a machine whose db is empty too,
// and continues bit-exactly.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "apps/train/training_state.h"
#include "core/data/dataset.h"
#include "core/ops/conv2d_algorithm_db.h"
#include "tests/support/gpu.h"
#include "tests/support/process.h"

using namespace alloy;
using namespace alloy::app;

namespace {

TrainConfig lenet_options() {
  TrainConfig options;
  options.model = "lenet";
  options.dataset = "synthetic";
  options.epochs = 1;
  options.batch_size = 16;
  options.lr = 0.05;
  options.momentum = 0.9;
  options.seed = 13;
  options.threads = 1;
  options.cuda_graph = "off";
  options.precision = amp::resolve_properties(amp::OptLevel::O0, {});
  BOOST_TEST(options.conv_algorithms == "measured");  // alloy train's default
  return options;
}

// Runs `trainer` until its step count reaches `steps`; `at_step_2` sees it after step 2.
void train_to(
    Trainer& trainer, std::int64_t steps, const std::function<void()>& at_step_2 = [] {}) {
  trainer.set_step_hook([&] {
    if (trainer.steps() == 2) at_step_2();
    return trainer.steps() == steps;
  });
  TrainObserver quiet;
  trainer.run(quiet);
  BOOST_TEST_REQUIRE(trainer.steps() == steps);
}

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), {}};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(conv_algorithms_checkpoint_gpu)

BOOST_AUTO_TEST_CASE(a_checkpoint_keeps_the_measured_algorithms_and_a_resume_uses_them) {
  test::TempDir first_machine, second_machine;
  setenv("ALLOY_CACHE_DIR", first_machine.path().c_str(), 1);
  cuda::reset_conv_algorithms();
  const auto data = data::load_datasets("synthetic", "", 13);

  Trainer trainer(lenet_options(), Device::cuda(0), data);
  checkpoint::CheckpointState state;
  train_to(trainer, 4, [&] { state = capture_training_state(trainer); });
  const std::optional<std::string> saved = state.run.conv_algorithms;
  BOOST_TEST_REQUIRE(saved.has_value());
  BOOST_TEST_MESSAGE("conv_algorithms:\n" << *saved);
  // Exactly what this run measured into its (fresh) db: both LeNet convolutions, forward and
  // filter gradient at least.
  const cuda::ConvAlgorithmTable measured =
      cuda::parse_conv_algorithms(read_file(first_machine.file("conv_algorithms.txt")));
  BOOST_TEST(cuda::parse_conv_algorithms(*saved) == measured);
  int forwards = 0, filters = 0;
  for (const auto& [key, choice] : measured) {
    forwards += key.find("\tforward") != std::string::npos;
    filters += key.find("\tfilter") != std::string::npos;
  }
  BOOST_TEST(forwards == 2);
  BOOST_TEST(filters == 2);

  // Another machine, its db empty: the resume loads the checkpoint's choices before any step.
  setenv("ALLOY_CACHE_DIR", second_machine.path().c_str(), 1);
  cuda::reset_conv_algorithms();
  Trainer resumed(lenet_options(), Device::cuda(0), data);
  restore_training_state(resumed, state, "step2.ckpt", {});
  BOOST_TEST(cuda::conv_algorithms_in_use() == *saved);
  train_to(resumed, 4);
  BOOST_TEST(resumed.params_digest() == trainer.params_digest());
  BOOST_TEST((capture_training_state(resumed).run.conv_algorithms == saved));
  BOOST_TEST(!std::filesystem::exists(second_machine.file("conv_algorithms.txt")));

  cuda::reset_conv_algorithms();
  unsetenv("ALLOY_CACHE_DIR");
}

BOOST_AUTO_TEST_SUITE_END()
