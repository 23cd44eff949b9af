// The one mapping between a CheckpointState's records and their entries in the on-disk `extra`
// map: each field's key, how its value is written as text, and what a value read back must be.
// The texts are those of the builds before the records were typed, so every file reads and
// re-serializes to the same bytes.
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "core/checkpoint/checkpoint.h"
#include "core/error.h"

namespace alloy::checkpoint {

namespace {

// Bounds beyond a value's type, checked when it is read.
constexpr double kNoBound = std::numeric_limits<double>::infinity();

// Calls `visit` with every record field of `state` and its key: a const state to write, a
// mutable one to read.
template <class State, class Visit>
void each_record(State& state, Visit& visit) {
  namespace key = record_keys;
  auto& run = state.run;
  visit.text(key::kDataset, run.dataset);
  visit.text(key::kDataDir, run.data_dir);
  visit.count(key::kThreads, run.threads);
  visit.text(key::kLrSchedule, run.lr_schedule);
  visit.count(key::kWarmupSteps, run.warmup_steps);
  visit.decimal(key::kMinLr, run.min_lr, kNoBound);
  visit.count(key::kAccumulationSteps, run.accumulation_steps, 1);
  visit.decimal(key::kClipGradNorm, run.clip_grad_norm, kNoBound);
  visit.text(key::kRecompute, run.recompute);
  visit.decimal(key::kEmaDecay, run.ema_decay, 1.0);
  visit.flag(key::kEmaWarmup, run.ema_warmup);
  visit.flag(key::kAllowTf32, run.allow_tf32);
  visit.flag(key::kStochasticRounding, run.stochastic_rounding);
  visit.decimal(key::kLabelSmoothing, run.label_smoothing, 1.0);
  visit.count(key::kImageSize, run.image_size);
  visit.count(key::kChannels, run.channels);
  visit.count(key::kNumClasses, run.num_classes);
  visit.count(key::kSyntheticSize, run.synthetic_size);
  visit.text(key::kNormalize, run.normalize);
  visit.text(key::kAugment, run.augment);
  visit.text(key::kConvAlgorithms, run.conv_algorithms);
  auto& epoch = state.epoch_sums;
  visit.count(key::kEpochImages, epoch.images);
  visit.count(key::kEpochCorrect, epoch.correct);
  visit.bits(key::kEpochLossSum, epoch.loss_sum);
  visit.bits(key::kEpochClipNormSum, epoch.clip_norm_sum);
  visit.count(key::kEpochClipFiniteSteps, epoch.clip_finite_steps);
  visit.count(key::kEpochClipClippedSteps, epoch.clip_clipped_steps);
  visit.count(key::kScalerOverflowStreak, state.scaler_record.overflow_streak);
  visit.text(key::kGptConfig, state.gpt.config);
  visit.text(key::kGptVocabulary, state.gpt.vocabulary);
  visit.text(key::kGptDataFile, state.gpt.data_file);
  visit.text(key::kGptValFile, state.gpt.val_file);
  visit.decimal(key::kGptValFraction, state.gpt.val_fraction, 1.0);
  visit.count(key::kGptEvalEvery, state.gpt.eval_every);
  visit.count(key::kGptEvalBatches, state.gpt.eval_batches, 1);
  visit.count(key::kGptSteps, state.gpt.steps, 1);
}

// Integers in decimal digits, doubles as the shortest decimal that reads back as the same
// double (or as their bits, where the sum must continue exactly), flags as true or false.
struct Writer {
  std::map<std::string, std::string>& entries;

  void text(const char* key, const std::optional<std::string>& value) {
    if (value) entries[key] = *value;
  }
  template <class Int>
  void count(const char* key, const std::optional<Int>& value, std::int64_t /*min*/ = 0) {
    if (value) entries[key] = std::to_string(*value);
  }
  void decimal(const char* key, const std::optional<double>& value, double /*below*/) {
    if (!value) return;
    char text[32];
    const auto result = std::to_chars(text, text + sizeof text, *value);
    entries[key] = std::string(text, result.ptr);
  }
  void bits(const char* key, const std::optional<double>& value) {
    if (!value) return;
    std::uint64_t word = 0;
    static_assert(sizeof word == sizeof *value);
    std::memcpy(&word, &*value, sizeof word);
    entries[key] = std::to_string(word);
  }
  void flag(const char* key, const std::optional<bool>& value) {
    if (value) entries[key] = *value ? "true" : "false";
  }
};

// Takes each record's entry out of `entries`; a value that does not parse, or lies outside
// what a writer can have written, is "corrupt field KEY 'VALUE'".
struct Reader {
  std::map<std::string, std::string>& entries;

  // The entry's text, removed from `entries`, or false when there is none.
  bool take(const char* key, std::string& text) {
    const auto it = entries.find(key);
    if (it == entries.end()) return false;
    text = std::move(it->second);
    entries.erase(it);
    return true;
  }

  [[noreturn]] static void corrupt(const char* key, const std::string& text) {
    fail("corrupt field ", key, " '", text, "'");
  }

  // Decimal digits only, as std::to_string writes a non-negative integer.
  static std::uint64_t digits(const char* key, const std::string& text) {
    std::uint64_t value = 0;
    bool ok = !text.empty() && text.size() <= 20;
    for (const char c : text) {
      if (c < '0' || c > '9') ok = false;
      if (!ok) break;
      const std::uint64_t digit = static_cast<std::uint64_t>(c - '0');
      if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) ok = false;
      value = value * 10 + digit;
    }
    if (!ok) corrupt(key, text);
    return value;
  }

  void text(const char* key, std::optional<std::string>& value) {
    std::string text;
    if (take(key, text)) value = std::move(text);
  }
  template <class Int>
  void count(const char* key, std::optional<Int>& value, std::int64_t min = 0) {
    std::string text;
    if (!take(key, text)) return;
    const std::uint64_t parsed = digits(key, text);
    if (parsed > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      fail("field ", key, " is out of range");
    }
    const auto wide = static_cast<std::int64_t>(parsed);
    if (wide < min || wide > std::numeric_limits<Int>::max()) corrupt(key, text);
    value = static_cast<Int>(wide);
  }
  void decimal(const char* key, std::optional<double>& value, double below) {
    std::string text;
    if (!take(key, text)) return;
    double parsed = 0;
    const auto result = std::from_chars(text.data(), text.data() + text.size(), parsed);
    if (result.ec != std::errc() || result.ptr != text.data() + text.size() ||
        !std::isfinite(parsed) || parsed < 0 || !(parsed < below)) {
      corrupt(key, text);
    }
    value = parsed;
  }
  void bits(const char* key, std::optional<double>& value) {
    std::string text;
    if (!take(key, text)) return;
    const std::uint64_t word = digits(key, text);
    double parsed = 0;
    std::memcpy(&parsed, &word, sizeof parsed);
    value = parsed;
  }
  void flag(const char* key, std::optional<bool>& value) {
    std::string text;
    if (!take(key, text)) return;
    if (text != "true" && text != "false") corrupt(key, text);
    value = text == "true";
  }
};

// Every record's key.
struct KeyLister {
  std::set<std::string> keys;

  void text(const char* key, const std::optional<std::string>& /*value*/) { keys.insert(key); }
  template <class Int>
  void count(const char* key, const std::optional<Int>& /*value*/, std::int64_t /*min*/ = 0) {
    keys.insert(key);
  }
  void decimal(const char* key, const std::optional<double>& /*value*/, double /*below*/) {
    keys.insert(key);
  }
  void bits(const char* key, const std::optional<double>& /*value*/) { keys.insert(key); }
  void flag(const char* key, const std::optional<bool>& /*value*/) { keys.insert(key); }
};

}  // namespace

std::map<std::string, std::string> extra_entries(const CheckpointState& state) {
  KeyLister lister;
  each_record(state, lister);
  for (const auto& entry : state.extra) {
    ALLOY_CHECK(lister.keys.count(entry.first) == 0, "checkpoint: extra entry ", entry.first,
                " is a record's key; the record's field holds its value");
  }
  std::map<std::string, std::string> entries = state.extra;
  Writer writer{entries};
  each_record(state, writer);
  return entries;
}

void read_records(CheckpointState& state) {
  Reader reader{state.extra};
  each_record(state, reader);
}

}  // namespace alloy::checkpoint
