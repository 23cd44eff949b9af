// --recompute on a real Trainer (a small batch-norm ResNet registered as a model): the run ends
// with the same params_digest and running statistics as keeping the activations, at O0 and O2,
// with a lower peak of
// device memory; checkpoints keep the setting and a resume takes it unless given; a model
// without blocks is a usage error.
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "apps/train/trainer.h"
#include "apps/train/training_state.h"
#include "core/data/synthetic.h"
#include "core/models/models.h"
#include "tests/apps/step_checks.h"
#include "tests/core/nn/gradient_accumulation.h"

using namespace alloy;

namespace {

// The peak of the epoch's device memory, heard from the trainer.
class PeakObserver : public app::TrainObserver {
 public:
  void on_epoch_end(const app::EpochStats& stats) override { peak = stats.peak_memory_bytes; }
  std::int64_t peak = 0;
};

const std::string& small_resnet() {
  static const std::string name = [] {
    models::register_model("recompute_small_resnet", [](Generator& generator, int) {
      return test::make_small_resnet(generator);
    });
    return std::string("recompute_small_resnet");
  }();
  return name;
}

app::TrainConfig options(amp::OptLevel level, const std::string& recompute) {
  app::TrainConfig o;
  o.model = small_resnet();
  o.dataset = "synthetic";
  o.epochs = 1;
  o.batch_size = 16;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.threads = 1;
  o.precision = amp::resolve_properties(level, {});
  o.recompute = recompute;
  return o;
}

struct Finished {
  std::string digest;
  std::vector<std::vector<float>> buffers;  // batch norm's running statistics
  std::int64_t peak = 0;
};

Finished train(const app::TrainConfig& o) {
  app::Trainer trainer(o, Device::cpu(), test::small_synthetic_data());
  PeakObserver observer;
  trainer.run(observer);
  Finished finished{trainer.params_digest(), {}, observer.peak};
  for (const nn::Buffer* buffer : trainer.model().buffers())
    finished.buffers.push_back(buffer->value.to_floats());
  return finished;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(trainer_recompute)

BOOST_AUTO_TEST_CASE(the_same_digest_with_less_memory_at_o0_and_o2) {
  for (const amp::OptLevel level : {amp::OptLevel::O0, amp::OptLevel::O2}) {
    BOOST_TEST_CONTEXT(amp::opt_level_name(level)) {
      const Finished kept = train(options(level, "none"));
      const Finished recomputed = train(options(level, "blocks"));
      BOOST_TEST(recomputed.digest == kept.digest);
      BOOST_TEST(recomputed.buffers == kept.buffers,
                 "the running statistics count each batch once");
      BOOST_TEST_MESSAGE(amp::opt_level_name(level) << " peak bytes: " << kept.peak << " kept, "
                                                    << recomputed.peak << " recomputed");
      BOOST_TEST(recomputed.peak < kept.peak);
    }
  }
}

BOOST_AUTO_TEST_CASE(checkpoints_keep_it_and_a_resume_takes_it_unless_given) {
  app::Trainer trainer(options(amp::OptLevel::O0, "blocks"), Device::cpu(),
                       test::small_synthetic_data());
  const checkpoint::CheckpointState state = app::capture_training_state(trainer);
  BOOST_TEST((state.run.recompute == std::optional<std::string>("blocks")));

  app::TrainConfig resumed;
  resumed.resume = "run.ckpt";
  app::apply_checkpoint_defaults(state, resumed);
  BOOST_TEST(resumed.recompute == "blocks");

  app::TrainConfig overridden;
  overridden.recompute = "none";
  overridden.explicitly_set.insert("recompute");
  app::apply_checkpoint_defaults(state, overridden);
  BOOST_TEST(overridden.recompute == "none");

  checkpoint::CheckpointState older = state;  // written before --recompute existed
  older.run.recompute.reset();
  app::TrainConfig from_older;
  app::apply_checkpoint_defaults(older, from_older);
  BOOST_TEST(from_older.recompute == "none");

  checkpoint::CheckpointState corrupt = state;
  corrupt.run.recompute = "sometimes";
  app::TrainConfig from_corrupt;
  BOOST_CHECK_THROW(app::apply_checkpoint_defaults(corrupt, from_corrupt), Error);
}

BOOST_AUTO_TEST_CASE(a_model_without_blocks_is_a_usage_error) {
  app::TrainConfig o = options(amp::OptLevel::O0, "blocks");
  o.model = "lenet";
  try {
    app::Trainer trainer(o, Device::cpu(), test::small_synthetic_data());
    BOOST_FAIL("no error");
  } catch (const UsageError& error) {
    const std::string message = error.what();
    BOOST_TEST(message.find("recompute blocks") != std::string::npos, message);
    BOOST_TEST(message.find("lenet") != std::string::npos, message);
  }
}

BOOST_AUTO_TEST_SUITE_END()
