// Counts a training step's host round trips (core/round_trips.h) step by step, on a real
// Trainer on synthetic data: shared by the CPU test and its GPU twin.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "amp/opt_level.h"
#include "apps/train/trainer.h"
#include "core/data/synthetic.h"
#include "core/round_trips.h"

namespace alloy::test {

struct StepCounts {
  // From the step hook of the step before to this step's hook: measured outside the trainer.
  RoundTrips measured;
  // The trainer's own count of the step (Trainer::last_step_round_trips()).
  RoundTrips reported;
  // memory_stats(device) in use at the step's hook, less the data category: the loader's
  // thread assembles the next batch whenever it gets the CPU, so the batches it holds vary
  // with timing (the step's own memory does not).
  std::int64_t bytes_in_use = 0;
  std::uint64_t staging_busy_waits = 0;  // Trainer::stager().busy_waits() so far
  std::int64_t extra = 0;                // what `sample` returned at the step's hook
};

struct StepRunOptions {
  std::string model = "lenet";
  amp::OptLevel level = amp::OptLevel::O0;
  int steps = 4;
  std::int64_t batch_size = 8;
  // Training examples; the default leaves the loader batches to assemble after the last
  // step, so that the memory it holds stays the same throughout.
  std::int64_t train_examples = 0;
  std::function<std::int64_t()> sample;  // read at each step's hook, for StepCounts::extra
  // The dynamic scale's initial value when set: one far above what half gradients hold makes
  // every step overflow and be skipped, so the overflow monitor's poll finds skips to report.
  std::optional<float> init_loss_scale;
  std::int64_t accumulation_steps = 1;  // micro-batches per step (apps/train/train_step.h)
};

inline app::TrainConfig step_run_train_options(const StepRunOptions& run) {
  app::TrainConfig options;
  options.model = run.model;
  options.dataset = "synthetic";
  options.epochs = 1;
  options.batch_size = run.batch_size;
  options.accumulation_steps = run.accumulation_steps;
  options.lr = 0.01;
  options.threads = 1;
  options.precision = amp::resolve_properties(run.level, {});
  if (run.init_loss_scale) options.precision.loss_scale.init_scale = *run.init_loss_scale;
  return options;
}

inline data::DatasetPair step_run_data(const StepRunOptions& run) {
  const std::int64_t examples =
      run.train_examples > 0 ? run.train_examples : (run.steps + 3) * run.batch_size;
  data::DatasetPair data;
  data.train = data::make_synthetic_dataset(examples, 1, "synthetic/train");
  data.test = data::make_synthetic_dataset(run.batch_size, 1, "synthetic/test");
  return data;
}

// Runs `run.steps` steps (or the whole epoch, if it is shorter) on `device` with `observer`,
// and returns each step's counts; the first step's `measured` includes setting up the epoch.
inline std::vector<StepCounts> count_steps(Device device, const StepRunOptions& run,
                                           app::TrainObserver& observer,
                                           const app::TrainConfig& options) {
  app::Trainer trainer(options, device, step_run_data(run));
  std::vector<StepCounts> counts;
  RoundTrips last = round_trips();
  trainer.set_step_hook([&] {
    const RoundTrips now = round_trips();
    StepCounts step;
    step.measured = now - last;
    step.reported = trainer.last_step_round_trips();
    const MemorySnapshot memory = memory_stats(device).snapshot();
    step.bytes_in_use = memory.total_current - memory.current_of(MemoryCategory::data);
    step.staging_busy_waits = trainer.stager().busy_waits();
    if (run.sample) step.extra = run.sample();
    counts.push_back(step);
    last = round_trips();  // the hook's own work is left out
    return static_cast<int>(counts.size()) == run.steps;
  });
  trainer.run(observer);
  return counts;
}

inline std::vector<StepCounts> count_steps(Device device, const StepRunOptions& run) {
  app::TrainObserver quiet;
  return count_steps(device, run, quiet, step_run_train_options(run));
}

}  // namespace alloy::test
