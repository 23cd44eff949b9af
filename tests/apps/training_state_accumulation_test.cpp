// --accumulation-steps in checkpoints (apps/train/training_state.h): a resume takes the
// checkpoint's value when the flag is not given, a file written before the key existed resumes with
// 1, the flag given wins, and a corrupt value fails naming the checkpoint.
#include <boost/test/unit_test.hpp>
#include <optional>
#include <string>

#include "apps/train/training_state.h"
#include "core/error.h"
#include "tests/core/checkpoint/damaged_files.h"

using namespace alloy;
using namespace alloy::app;

namespace {

checkpoint::CheckpointState state_with(std::optional<std::int64_t> accumulation_steps) {
  checkpoint::CheckpointState state;
  state.model = "mlp";
  state.batch_size = 256;
  state.optimizer.kind = "sgd";
  state.optimizer.lr = 0.1f;
  state.run.accumulation_steps = accumulation_steps;
  return state;
}

TrainConfig resuming(const std::string& path) {
  TrainConfig options;
  options.resume = path;
  options.explicitly_set = {"resume"};
  return options;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(training_state_accumulation)

BOOST_AUTO_TEST_CASE(a_resume_takes_the_checkpoints_accumulation_steps_unless_given) {
  TrainConfig options = resuming("run/step-00000050.ckpt");
  apply_checkpoint_defaults(state_with(4), options);
  BOOST_TEST(options.accumulation_steps == 4);

  // Older files have no key: they were written by runs without accumulation.
  TrainConfig older = resuming("old.ckpt");
  older.accumulation_steps = 3;
  apply_checkpoint_defaults(state_with(std::nullopt), older);
  BOOST_TEST(older.accumulation_steps == 1);

  TrainConfig given = resuming("run");
  given.accumulation_steps = 2;
  given.explicitly_set.insert("accumulation_steps");
  apply_checkpoint_defaults(state_with(4), given);
  BOOST_TEST(given.accumulation_steps == 2);
}

BOOST_AUTO_TEST_CASE(a_count_below_one_is_corrupt) {
  BOOST_TEST(checkpoint::extra_entries(state_with(4)).at("accumulation_steps") == "4");
  const std::string image = checkpoint::test::framed(
      checkpoint::test::payload_with_entry(state_with(std::nullopt), "accumulation_steps", "0"));
  BOOST_CHECK_EXCEPTION(checkpoint::decode_checkpoint(image, "bad.ckpt"), Error,
                        [](const Error& error) {
                          return std::string(error.what()) ==
                                 "checkpoint bad.ckpt: corrupt field accumulation_steps '0'";
                        });
}

BOOST_AUTO_TEST_SUITE_END()
