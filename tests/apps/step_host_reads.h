// Counts what a training step reads back to the host (core/host_reads.h), step by step, on a
// real Trainer: shared by the CPU test and its GPU twin.
#pragma once

#include <cstdint>
#include <vector>

#include "amp/opt_level.h"
#include "apps/trainer.h"
#include "core/data/dataset.h"
#include "core/host_reads.h"

namespace alloy::test {

// Host reads between the end of one step and the end of the next, for `steps` steps of an MLP
// on synthetic data at `level`, with an observer that never asks for the loss.
inline std::vector<std::uint64_t> host_reads_per_step(Device device, amp::OptLevel level,
                                                      int steps) {
  app::TrainOptions options;
  options.model = "mlp";
  options.dataset = "synthetic";
  options.epochs = 1;
  options.batch_size = 64;
  options.lr = 0.05;
  options.threads = 1;
  options.precision = amp::resolve_properties(level, {});
  app::Trainer trainer(options, device, data::load_datasets("synthetic", "", 1));
  std::vector<std::uint64_t> reads;
  std::uint64_t last = 0;
  bool started = false;
  trainer.set_step_hook([&] {
    const std::uint64_t now = host_read_count();
    if (started) reads.push_back(now - last);
    started = true;  // the first step's reads include setting up the epoch
    last = now;
    return static_cast<int>(reads.size()) == steps;
  });
  app::TrainObserver quiet;
  trainer.run(quiet);
  return reads;
}

}  // namespace alloy::test
