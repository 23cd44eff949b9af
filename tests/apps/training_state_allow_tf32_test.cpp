// --allow-tf32 in checkpoints (apps/train/training_state.h): a resume takes the checkpoint's
// setting when the flag is not given, a file written before the key existed resumes with it off (as
// it was trained), the flag given wins, and a corrupt value fails naming the checkpoint.
#include <boost/test/unit_test.hpp>
#include <optional>
#include <string>

#include "apps/train/training_state.h"
#include "core/error.h"
#include "tests/core/checkpoint/damaged_files.h"

using namespace alloy;
using namespace alloy::app;

namespace {

checkpoint::CheckpointState state_with(std::optional<bool> allow_tf32) {
  checkpoint::CheckpointState state;
  state.model = "mlp";
  state.batch_size = 256;
  state.optimizer.kind = "sgd";
  state.optimizer.lr = 0.1f;
  state.run.allow_tf32 = allow_tf32;
  return state;
}

TrainConfig resuming(const std::string& path) {
  TrainConfig options;
  options.resume = path;
  options.explicitly_set = {"resume"};
  return options;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(training_state_allow_tf32)

BOOST_AUTO_TEST_CASE(a_resume_takes_the_checkpoints_setting_unless_given) {
  TrainConfig options = resuming("run/step-00000050.ckpt");
  apply_checkpoint_defaults(state_with(true), options);
  BOOST_TEST(options.allow_tf32);
  TrainConfig turned_off = resuming("run/step-00000050.ckpt");
  turned_off.allow_tf32 = true;
  apply_checkpoint_defaults(state_with(false), turned_off);
  BOOST_TEST(!turned_off.allow_tf32);

  // Older files have no key: they were trained in IEEE fp32.
  TrainConfig older = resuming("old.ckpt");
  older.allow_tf32 = true;
  apply_checkpoint_defaults(state_with(std::nullopt), older);
  BOOST_TEST(!older.allow_tf32);

  TrainConfig given = resuming("run");
  given.allow_tf32 = false;
  given.explicitly_set.insert("allow_tf32");
  apply_checkpoint_defaults(state_with(true), given);
  BOOST_TEST(!given.allow_tf32);
}

BOOST_AUTO_TEST_CASE(the_key_holds_true_or_false_and_anything_else_is_corrupt) {
  BOOST_TEST(checkpoint::extra_entries(state_with(true)).at("allow_tf32") == "true");
  BOOST_TEST(checkpoint::extra_entries(state_with(false)).at("allow_tf32") == "false");
  const std::string image = checkpoint::test::framed(
      checkpoint::test::payload_with_entry(state_with(std::nullopt), "allow_tf32", "yes"));
  BOOST_CHECK_EXCEPTION(
      checkpoint::decode_checkpoint(image, "bad.ckpt"), Error, [](const Error& error) {
        return std::string(error.what()) == "checkpoint bad.ckpt: corrupt field allow_tf32 'yes'";
      });
}

BOOST_AUTO_TEST_SUITE_END()
