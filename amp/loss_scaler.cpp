#include "amp/loss_scaler.h"

#include <array>
#include <cstring>

namespace alloy::amp {

namespace {

// The words of the scaler's buffer, each 4 bytes. The snapshot's fields come first, so that
// restore() writes them in one copy and leaves the step's verdict and the unreported overflow
// alone.
enum Word : std::size_t {
  kScale,  // f32
  kCleanSteps,
  kSkippedSteps,
  kAtMinStreak,
  kOverflowStreak,
  kFirstOverflow,
  kSnapshotWords,  // the words above are the snapshot's
  kUnreportedOverflow = kSnapshotWords,
  kFoundInf,  // f32
  kWords
};
using Words = std::array<std::int32_t, kWords>;

std::int32_t float_word(float value) {
  std::int32_t word = 0;
  std::memcpy(&word, &value, sizeof word);
  return word;
}

float word_float(std::int32_t word) {
  float value = 0;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

// The first `count` words of `words` as a host tensor, to copy into the device buffer.
Tensor host_words(const Words& words, std::size_t count) {
  Tensor host = Tensor::empty({static_cast<std::int64_t>(count)}, DType::i32, Device::cpu(),
                              MemoryCategory::optimizer_state);
  std::memcpy(host.data<std::int32_t>(), words.data(), count * sizeof(std::int32_t));
  return host;
}

Tensor word_view(const Tensor& buffer, Word word, DType dtype) {
  return buffer.view(word * sizeof(std::int32_t), {1}, dtype);
}

ScalerSnapshot snapshot_of(const Words& words) {
  ScalerSnapshot snapshot;
  snapshot.scale = word_float(words[kScale]);
  snapshot.clean_steps = words[kCleanSteps];
  snapshot.skipped_steps = words[kSkippedSteps];
  snapshot.at_min_streak = words[kAtMinStreak];
  snapshot.overflow_streak = words[kOverflowStreak];
  snapshot.first_overflow = words[kFirstOverflow];
  return snapshot;
}

// The snapshot's words (the first kSnapshotWords of a buffer).
Words words_of(const ScalerSnapshot& snapshot) {
  Words words{};
  words[kScale] = float_word(snapshot.scale);
  words[kCleanSteps] = snapshot.clean_steps;
  words[kSkippedSteps] = snapshot.skipped_steps;
  words[kAtMinStreak] = snapshot.at_min_streak;
  words[kOverflowStreak] = snapshot.overflow_streak;
  words[kFirstOverflow] = snapshot.first_overflow;
  return words;
}

}  // namespace

LossScaler::LossScaler(const LossScaleConfig& config, Device device) : config_(config) {
  ScalerSnapshot initial;
  initial.scale = config.dynamic ? config.init_scale : config.static_scale;
  Words words = words_of(initial);
  words[kUnreportedOverflow] = -1;
  words[kFoundInf] = float_word(0.0f);
  const Tensor host = host_words(words, kWords);
  if (device.is_cpu()) {
    buffer_ = host;
  } else {
    buffer_ = Tensor::empty({kWords}, DType::i32, device, MemoryCategory::optimizer_state);
    buffer_.copy_from(host);
  }
  state_.scale = word_view(buffer_, kScale, DType::f32);
  state_.clean_steps = word_view(buffer_, kCleanSteps, DType::i32);
  state_.skipped_steps = word_view(buffer_, kSkippedSteps, DType::i32);
  state_.at_min_streak = word_view(buffer_, kAtMinStreak, DType::i32);
  state_.overflow_streak = word_view(buffer_, kOverflowStreak, DType::i32);
  state_.first_overflow = word_view(buffer_, kFirstOverflow, DType::i32);
  state_.unreported_overflow = word_view(buffer_, kUnreportedOverflow, DType::i32);
  state_.found_inf = word_view(buffer_, kFoundInf, DType::f32);
}

void LossScaler::update() {
  if (config_.dynamic) update_scale(state_, config_);
}

ScalerSnapshot LossScaler::snapshot() const {
  Words words{};
  buffer_.download_to(words.data());
  return snapshot_of(words);
}

void LossScaler::queue_poll() {
  poll_.queue(buffer_);
  // After the copy, which so holds the index taken; whatever the index, since the host learns
  // it only from the copy.
  state_.unreported_overflow.fill(-1.0f);
}

LossScaler::Poll LossScaler::take_poll() {
  Words words{};
  std::memcpy(words.data(), poll_.read(), sizeof words);
  return {snapshot_of(words), words[kUnreportedOverflow]};
}

void LossScaler::restore(const ScalerSnapshot& snapshot) {
  buffer_.view(0, {kSnapshotWords}, DType::i32)
      .copy_from(host_words(words_of(snapshot), kSnapshotWords));
}

}  // namespace alloy::amp
