// Checkpoints that `alloy train` wrote before the records were typed (tests/data/
// checkpoint_corpus/valid-lenet-o2-extras.ckpt: LeNet at O2 on synthetic data, stopped at step 3
// of 8 with --lr-schedule cosine --warmup-steps 1 --clip-grad-norm 1 --label-smoothing 0.1;
// valid-gpt-tiny.ckpt: a one-layer GPT after 2 steps) still resume: their settings come back
// as the run's options, the trainers take their state, and a capture of the resumed trainer
// is the file's state again.
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "apps/train/lm_trainer.h"
#include "apps/train/training_state.h"
#include "core/checkpoint/checkpoint_file.h"

using namespace alloy;
using namespace alloy::app;
namespace ckpt = alloy::checkpoint;

namespace {

const std::string kCorpus = std::string(ALLOY_SOURCE_DIR) + "/tests/data/checkpoint_corpus/";

// The payload of the file at `path`: its bytes after the header.
std::string payload_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return bytes.substr(ckpt::kHeaderBytes);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(corpus_checkpoints)

BOOST_AUTO_TEST_CASE(a_lenet_o2_checkpoint_from_before_typed_records_resumes) {
  const std::string path = kCorpus + "valid-lenet-o2-extras.ckpt";
  const ckpt::CheckpointState state = ckpt::read_checkpoint(path);

  TrainConfig o;
  o.resume = path;
  o.explicitly_set = {"resume"};
  apply_checkpoint_defaults(state, o);
  BOOST_TEST(o.model == "lenet");
  BOOST_TEST(o.dataset == "synthetic");
  BOOST_TEST(o.synthetic_size == 512);
  BOOST_TEST(o.batch_size == 64);
  BOOST_TEST(o.lr_schedule == "cosine");
  BOOST_TEST(o.warmup_steps == 1);
  BOOST_TEST(o.clip_grad_norm == 1.0);
  BOOST_TEST(o.label_smoothing == 0.1);
  BOOST_TEST(o.ema_decay == 0.0);
  BOOST_TEST(o.accumulation_steps == 1);
  BOOST_TEST(o.recompute == "none");
  BOOST_TEST(!o.allow_tf32);
  BOOST_TEST(o.normalize == "auto");
  BOOST_TEST(o.augment == "default");
  BOOST_TEST(amp::opt_level_name(o.precision.level) == std::string("O2"));
  o.threads = 2;  // the run's own: no warning
  o.steps = 8;

  Trainer trainer(o, Device::cpu(), load_training_data(o));
  std::vector<std::string> warnings;
  restore_training_state(trainer, state, path,
                         [&](const std::string& warning) { warnings.push_back(warning); });
  BOOST_TEST(warnings.empty());
  BOOST_TEST(trainer.steps() == 3);
  BOOST_TEST(trainer.params_digest() == state.params_digest);
  const EpochProgress progress = trainer.epoch_progress();
  BOOST_TEST(progress.batches == 3);
  BOOST_TEST(progress.images == 192);
  BOOST_TEST(progress.correct == 19);
  BOOST_TEST(progress.clip.finite_steps == 3);
  BOOST_TEST(progress.clip.clipped_steps == 0);

  // Saved again where it stands, it is the same file, byte for byte.
  ckpt::CheckpointState captured = capture_training_state(trainer);
  captured.alloy_version = state.alloy_version;
  BOOST_TEST((ckpt::serialize_state(captured) == payload_of(path)));
}

BOOST_AUTO_TEST_CASE(a_tiny_gpt_checkpoint_from_before_typed_records_resumes) {
  const std::string path = kCorpus + "valid-gpt-tiny.ckpt";
  const ckpt::CheckpointState state = ckpt::read_checkpoint(path);
  BOOST_TEST((state.gpt.config == std::optional<std::string>("1 2 32 16 64 0 1")));
  BOOST_TEST((state.gpt.vocabulary == std::optional<std::string>("")));
  BOOST_TEST(vocabulary_of(state).empty());

  TrainConfig o;
  o.model = state.model;
  o.text.gpt = gpt_config_of(state, path);
  BOOST_TEST(o.text.gpt.n_embd == 32);
  BOOST_TEST(o.text.gpt.vocab_size == 64);
  o.dataset = "synthetic";
  o.batch_size = 4;
  o.steps = 2;
  o.seed = static_cast<std::int64_t>(state.seed);
  LmTrainer trainer(o, Device::cpu(), load_token_corpus(o));
  trainer.restore(state, path);
  BOOST_TEST(trainer.steps() == 2);
  BOOST_TEST(trainer.params_digest() == state.params_digest);

  ckpt::CheckpointState captured = trainer.capture();
  captured.alloy_version = state.alloy_version;
  // Today's checkpoints also hold the run's settings, for a bare --resume; the rest is the
  // file's, byte for byte.
  BOOST_TEST((captured.run.dataset == std::optional<std::string>("synthetic")));
  BOOST_TEST((captured.gpt.steps == std::optional<std::int64_t>(2)));
  captured.run = ckpt::RunRecord();
  ckpt::GptRecord shape;
  shape.config = captured.gpt.config;
  shape.vocabulary = captured.gpt.vocabulary;
  captured.gpt = shape;
  BOOST_TEST((ckpt::serialize_state(captured) == payload_of(path)));
}

BOOST_AUTO_TEST_SUITE_END()
