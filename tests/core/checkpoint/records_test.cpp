// CheckpointState's typed records (core/checkpoint/checkpoint.h) and their on-disk form: every
// field goes through serialize/deserialize unchanged, under the keys and in the value texts
// older builds wrote and read; a file without a key leaves its field empty, unknown keys are
// carried along, and a value no writer writes fails naming the checkpoint and the key.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "core/checkpoint/checkpoint_file.h"
#include "core/error.h"
#include "tests/core/checkpoint/damaged_files.h"

using namespace alloy;
using namespace alloy::checkpoint;
using namespace alloy::checkpoint::test;

namespace {

std::uint64_t bits_of(double value) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// Every record field set, each to a value of its own.
CheckpointState every_record() {
  CheckpointState state = marker_state();
  RunRecord& run = state.run;
  run.dataset = "cifar10";
  run.data_dir = "/data/cifar 10";
  run.threads = 12;
  run.lr_schedule = "cosine";
  run.warmup_steps = 250;
  run.min_lr = 1e-5;
  run.accumulation_steps = 4;
  run.clip_grad_norm = 0.1;
  run.recompute = "blocks";
  run.ema_decay = 0.999;
  run.ema_warmup = true;
  run.allow_tf32 = false;
  run.stochastic_rounding = true;
  run.label_smoothing = 0.1;
  run.image_size = 32;
  run.channels = 3;
  run.num_classes = 10;
  run.synthetic_size = 2048;
  run.normalize = "imagenet";
  run.augment = "none";
  run.conv_algorithms = "NVIDIA H100\t1\tf16\t...\n";
  EpochRecord& epoch = state.epoch_sums;
  epoch.images = 6400;
  epoch.correct = 5123;
  epoch.loss_sum = 1234.5678901234567;
  epoch.clip_norm_sum = 0.30000000000000004;
  epoch.clip_finite_steps = 99;
  epoch.clip_clipped_steps = 7;
  state.scaler_record.overflow_streak = 3;
  state.gpt.config = "1 2 32 16 64 0 1";
  state.gpt.vocabulary = std::string("ab\0c\n", 5);
  state.gpt.data_file = "/data/tiny shakespeare.txt";
  state.gpt.val_file = "val.bin";
  state.gpt.val_fraction = 0.05;
  state.gpt.eval_every = 250;
  state.gpt.eval_batches = 20;
  state.gpt.steps = 5000;
  state.extra = {{"a.later.key", "kept"}};
  return state;
}

CheckpointState round_trip(const CheckpointState& state) {
  return deserialize_state(serialize_state(state));
}

// The message read_checkpoint gives for a file holding `value` under `key`.
std::string error_for(const std::string& key, const std::string& value) {
  const std::string image = framed(payload_with_entry(marker_state(), key, value));
  try {
    decode_checkpoint(image, "bad.ckpt");
  } catch (const Error& error) {
    return error.what();
  }
  return "(read without error)";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_records)

BOOST_AUTO_TEST_CASE(every_field_round_trips_through_serialize_and_deserialize) {
  const CheckpointState state = every_record();
  const CheckpointState back = round_trip(state);
  const RunRecord& a = state.run;
  const RunRecord& b = back.run;
  BOOST_TEST((a.dataset == b.dataset));
  BOOST_TEST((a.data_dir == b.data_dir));
  BOOST_TEST((a.threads == b.threads));
  BOOST_TEST((a.lr_schedule == b.lr_schedule));
  BOOST_TEST((a.warmup_steps == b.warmup_steps));
  BOOST_TEST((a.min_lr == b.min_lr));
  BOOST_TEST((a.accumulation_steps == b.accumulation_steps));
  BOOST_TEST((a.clip_grad_norm == b.clip_grad_norm));
  BOOST_TEST((a.recompute == b.recompute));
  BOOST_TEST((a.ema_decay == b.ema_decay));
  BOOST_TEST((a.ema_warmup == b.ema_warmup));
  BOOST_TEST((a.allow_tf32 == b.allow_tf32));
  BOOST_TEST((a.stochastic_rounding == b.stochastic_rounding));
  BOOST_TEST((a.label_smoothing == b.label_smoothing));
  BOOST_TEST((a.image_size == b.image_size));
  BOOST_TEST((a.channels == b.channels));
  BOOST_TEST((a.num_classes == b.num_classes));
  BOOST_TEST((a.synthetic_size == b.synthetic_size));
  BOOST_TEST((a.normalize == b.normalize));
  BOOST_TEST((a.augment == b.augment));
  BOOST_TEST((a.conv_algorithms == b.conv_algorithms));
  const EpochRecord& e = state.epoch_sums;
  const EpochRecord& f = back.epoch_sums;
  BOOST_TEST((e.images == f.images));
  BOOST_TEST((e.correct == f.correct));
  BOOST_TEST(bits_of(*e.loss_sum) == bits_of(*f.loss_sum));
  BOOST_TEST(bits_of(*e.clip_norm_sum) == bits_of(*f.clip_norm_sum));
  BOOST_TEST((e.clip_finite_steps == f.clip_finite_steps));
  BOOST_TEST((e.clip_clipped_steps == f.clip_clipped_steps));
  BOOST_TEST((state.scaler_record.overflow_streak == back.scaler_record.overflow_streak));
  BOOST_TEST((state.gpt.config == back.gpt.config));
  BOOST_TEST((state.gpt.vocabulary == back.gpt.vocabulary));
  BOOST_TEST((state.gpt.data_file == back.gpt.data_file));
  BOOST_TEST((state.gpt.val_file == back.gpt.val_file));
  BOOST_TEST((state.gpt.val_fraction == back.gpt.val_fraction));
  BOOST_TEST((state.gpt.eval_every == back.gpt.eval_every));
  BOOST_TEST((state.gpt.eval_batches == back.gpt.eval_batches));
  BOOST_TEST((state.gpt.steps == back.gpt.steps));
  // Unknown keys travel on; the records' keys are not among them.
  BOOST_TEST((back.extra == std::map<std::string, std::string>{{"a.later.key", "kept"}}));
  // And the state re-serializes to the same bytes.
  BOOST_TEST((serialize_state(back) == serialize_state(state)));
}

// The on-disk names and value texts are the ones every earlier build wrote.
BOOST_AUTO_TEST_CASE(the_keys_and_value_texts_are_the_files_ones) {
  const std::map<std::string, std::string> expected = {
      {"dataset", "cifar10"},
      {"data_dir", "/data/cifar 10"},
      {"threads", "12"},
      {"lr_schedule", "cosine"},
      {"warmup_steps", "250"},
      {"min_lr", "1e-05"},
      {"accumulation_steps", "4"},
      {"clip_grad_norm", "0.1"},
      {"recompute", "blocks"},
      {"ema_decay", "0.999"},
      {"ema_warmup", "true"},
      {"allow_tf32", "false"},
      {"stochastic_rounding", "true"},
      {"label_smoothing", "0.1"},
      {"image_size", "32"},
      {"channels", "3"},
      {"num_classes", "10"},
      {"synthetic_size", "2048"},
      {"normalize", "imagenet"},
      {"augment", "none"},
      {"conv_algorithms", "NVIDIA H100\t1\tf16\t...\n"},
      {"epoch_images", "6400"},
      {"epoch_correct", "5123"},
      {"epoch_loss_sum_bits", std::to_string(bits_of(1234.5678901234567))},
      {"epoch_clip_norm_sum_bits", std::to_string(bits_of(0.30000000000000004))},
      {"epoch_clip_finite_steps", "99"},
      {"epoch_clip_clipped_steps", "7"},
      {"scaler_overflow_streak", "3"},
      {"gpt.config", "1 2 32 16 64 0 1"},
      {"gpt.vocabulary", std::string("ab\0c\n", 5)},
      {"gpt.data_file", "/data/tiny shakespeare.txt"},
      {"gpt.val_file", "val.bin"},
      {"gpt.val_fraction", "0.05"},
      {"gpt.eval_every", "250"},
      {"gpt.eval_batches", "20"},
      {"gpt.steps", "5000"},
      {"a.later.key", "kept"},
  };
  BOOST_TEST((extra_entries(every_record()) == expected));

  // A file with those entries, as an older build wrote them, reads into the same records.
  std::string payload = serialize_state(marker_state());
  for (const auto& [key, value] : expected)
    payload = payload_with_entry(deserialize_state(payload), key, value);
  BOOST_TEST((serialize_state(deserialize_state(payload)) == serialize_state(every_record())));
}

BOOST_AUTO_TEST_CASE(a_file_without_the_keys_leaves_every_field_empty) {
  const CheckpointState back = round_trip(marker_state());
  BOOST_TEST(extra_entries(back).empty());
  BOOST_TEST(!back.run.dataset.has_value());
  BOOST_TEST(!back.run.accumulation_steps.has_value());
  BOOST_TEST(!back.run.allow_tf32.has_value());
  BOOST_TEST(!back.epoch_sums.loss_sum.has_value());
  BOOST_TEST(!back.scaler_record.overflow_streak.has_value());
  BOOST_TEST(!back.gpt.config.has_value());
}

BOOST_AUTO_TEST_CASE(a_records_key_in_extra_is_refused) {
  CheckpointState state = marker_state();
  state.extra["threads"] = "8";
  BOOST_CHECK_THROW(serialize_state(state), Error);
}

BOOST_AUTO_TEST_CASE(a_value_no_writer_writes_fails_naming_the_checkpoint_and_the_key) {
  BOOST_TEST(error_for("warmup_steps", "-3") ==
             "checkpoint bad.ckpt: corrupt field warmup_steps '-3'");
  BOOST_TEST(error_for("epoch_images", "12a") ==
             "checkpoint bad.ckpt: corrupt field epoch_images '12a'");
  BOOST_TEST(error_for("epoch_correct", "") ==
             "checkpoint bad.ckpt: corrupt field epoch_correct ''");
  BOOST_TEST(error_for("epoch_loss_sum_bits", "18446744073709551616") ==
             "checkpoint bad.ckpt: corrupt field epoch_loss_sum_bits '18446744073709551616'");
  BOOST_TEST(error_for("epoch_images", "9223372036854775808") ==
             "checkpoint bad.ckpt: field epoch_images is out of range");
  BOOST_TEST(error_for("image_size", "2147483648") ==
             "checkpoint bad.ckpt: corrupt field image_size '2147483648'");
  BOOST_TEST(error_for("accumulation_steps", "0") ==
             "checkpoint bad.ckpt: corrupt field accumulation_steps '0'");
  BOOST_TEST(error_for("min_lr", "-0.1") == "checkpoint bad.ckpt: corrupt field min_lr '-0.1'");
  BOOST_TEST(error_for("clip_grad_norm", "inf") ==
             "checkpoint bad.ckpt: corrupt field clip_grad_norm 'inf'");
  BOOST_TEST(error_for("clip_grad_norm", "1.0x") ==
             "checkpoint bad.ckpt: corrupt field clip_grad_norm '1.0x'");
  BOOST_TEST(error_for("label_smoothing", "1") ==
             "checkpoint bad.ckpt: corrupt field label_smoothing '1'");
  BOOST_TEST(error_for("ema_decay", "1.5") == "checkpoint bad.ckpt: corrupt field ema_decay '1.5'");
  BOOST_TEST(error_for("stochastic_rounding", "1") ==
             "checkpoint bad.ckpt: corrupt field stochastic_rounding '1'");
  BOOST_TEST(error_for("gpt.steps", "0") == "checkpoint bad.ckpt: corrupt field gpt.steps '0'");
  BOOST_TEST(error_for("gpt.eval_batches", "0") ==
             "checkpoint bad.ckpt: corrupt field gpt.eval_batches '0'");
  BOOST_TEST(error_for("gpt.val_fraction", "1") ==
             "checkpoint bad.ckpt: corrupt field gpt.val_fraction '1'");
  // The limits themselves read.
  BOOST_TEST(error_for("image_size", "2147483647") == "(read without error)");
  BOOST_TEST(error_for("epoch_images", "9223372036854775807") == "(read without error)");
  BOOST_TEST(error_for("label_smoothing", "0.9999") == "(read without error)");
}

BOOST_AUTO_TEST_SUITE_END()
