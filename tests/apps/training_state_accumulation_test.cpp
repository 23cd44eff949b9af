// --accumulation-steps in checkpoints (apps/train/training_state.h): a resume takes the
// checkpoint's value when the flag is not given, a file written before the key existed resumes with
// 1, the flag given wins, and a corrupt value fails naming the checkpoint.
#include <boost/test/unit_test.hpp>
#include <string>

#include "apps/train/training_state.h"
#include "core/error.h"

using namespace alloy;
using namespace alloy::app;

namespace {

checkpoint::CheckpointState state_with(const std::string* accumulation_steps) {
  checkpoint::CheckpointState state;
  state.model = "mlp";
  state.batch_size = 256;
  state.optimizer.kind = "sgd";
  state.optimizer.lr = 0.1f;
  if (accumulation_steps) state.extra["accumulation_steps"] = *accumulation_steps;
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
  const std::string four = "4";
  TrainConfig options = resuming("run/step-00000050.ckpt");
  apply_checkpoint_defaults(state_with(&four), options);
  BOOST_TEST(options.accumulation_steps == 4);

  // Older files have no key: they were written by runs without accumulation.
  TrainConfig older = resuming("old.ckpt");
  older.accumulation_steps = 3;
  apply_checkpoint_defaults(state_with(nullptr), older);
  BOOST_TEST(older.accumulation_steps == 1);

  TrainConfig given = resuming("run");
  given.accumulation_steps = 2;
  given.explicitly_set.insert("accumulation_steps");
  apply_checkpoint_defaults(state_with(&four), given);
  BOOST_TEST(given.accumulation_steps == 2);

  const std::string zero = "0";
  TrainConfig corrupt = resuming("bad.ckpt");
  BOOST_CHECK_EXCEPTION(apply_checkpoint_defaults(state_with(&zero), corrupt), Error,
                        [](const Error& error) {
                          const std::string message = error.what();
                          return message.find("bad.ckpt") != std::string::npos &&
                                 message.find("accumulation_steps") != std::string::npos;
                        });
}

BOOST_AUTO_TEST_SUITE_END()
