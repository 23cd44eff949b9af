// Memory measurement, as `alloy mem` reports it (apps/cli/memory_report.h): a few real steps of
// one model at one opt level (the step training runs, apps/train/train_step.h, so the figures are
// what training allocates), and the allocator's peak bytes per memory category and in total
// (core/memory.h is the single source of every figure), and images/s.
//
// What the figures mean: each category's figure is that category's own peak during the
// measured steps; peak_bytes is the peak of the sum of all categories, so it is at most the sum
// of the category peaks (categories peak at different moments: activations at the end of the
// forward pass, gradients and optimizer state after it). Peaks restart once the model, the amp
// layer and the synthetic batch are built, so the fp32 copy of a model that O2/O3 round to half
// before training does not count: the figures are those of steady-state training.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "amp/opt_level.h"
#include "core/device.h"
#include "core/memory.h"
#include "core/models/gpt.h"
#include "core/optim/optimizer.h"

namespace alloy::app {

// The optimizer `alloy mem` trains with: SGD with momentum 0.9 (one fp32 buffer per canonical
// parameter) or AdamW (two).
optim::OptimizerConfig mem_optimizer_config(const std::string& kind);

// What one measurement runs.
struct MeasureConfig {
  std::string model;
  models::GptConfig gpt;  // for a sequence model (models::is_gpt_model)
  std::int64_t batch_size = 1;
  int image_size = 28;
  int channels = 1;
  int num_classes = 10;
  std::string normalize = "auto";
  std::int64_t steps = 3;
  // Each step's batch in this many micro-batches, as evenly as possible
  // (apps/train/micro_batches.h).
  std::int64_t accumulation_steps = 1;
  float clip_grad_norm = 0;        // > 0: the step clips the gradient norm, as --clip-grad-norm
  std::string recompute = "none";  // activation recomputation, as --recompute
  std::string layout = "auto";     // the activations' order, as alloy train --layout
  float ema_decay = 0;             // > 0: the step updates weight averages, as --ema-decay
  std::int64_t seed = 1;
  Device device = Device::cpu();
  optim::OptimizerConfig optimizer = mem_optimizer_config("sgd");
  // Data parallelism, simulated in this one process: rank 0 of world_size ranks, whose
  // collectives move nothing (each rank's memory is the same whatever the others hold), with
  // its share of batch_size and DDP's gradient buckets; zero 1 shards the fp32 masters and the
  // optimizer's state as `alloy train --zero 1` (apps/train/zero.h; rank 0's shard is the
  // largest). World 1 and zero 0: a single process.
  int world_size = 1;
  int zero = 0;
};

using CategoryBytes = std::array<std::int64_t, kMemoryCategoryCount>;

// A CUDA device's memory after a level's steps, before its teardown. The block cache holds every
// block the level allocated (it gives none back while the level runs), so reserved_bytes is the
// level's peak reservation; the driver's used bytes add the CUDA context, the libraries' memory
// and any other process on the device.
struct DeviceView {
  std::int64_t reserved_bytes = 0;     // cuda::cache_statistics: in use plus cached
  std::int64_t driver_used_bytes = 0;  // cudaMemGetInfo: total minus free
  std::int64_t driver_total_bytes = 0;
};

// How close `--max-batch`'s largest fitting and smallest failing batch end, relative to the
// fitting one.
constexpr double kMaxBatchTolerance = 1.0 / 32;

// `--max-batch`'s answer for one level (apps/train/max_batch.h).
struct MaxBatch {
  std::int64_t largest_fitting = 0;   // 0: not even batch 1 fits
  std::int64_t smallest_failing = 0;  // the smallest batch seen not to fit; 0: none up to limit
  std::int64_t limit = 0;             // the largest batch the search would try
  int probes = 0;                     // batches tried
  bool reached_limit() const { return smallest_failing == 0; }
};

struct LevelReport {
  amp::AmpProperties properties;
  int world_size = 1;  // MeasureConfig's
  int zero = 0;
  CategoryBytes peak{};         // each category's own peak during the steps
  std::int64_t peak_bytes = 0;  // the peak of the sum (MemorySnapshot::total_peak)
  // What was still allocated after the level was torn down, against before it was built:
  // zero unless something leaked.
  std::int64_t leaked_bytes = 0;
  std::int64_t parameter_count = 0;
  std::int64_t steps = 0;
  double timed_seconds = 0;  // the steps after the first (the only one when steps == 1)
  double images_per_second = 0;
  std::optional<DeviceView> device_view;  // on a CUDA device
  std::optional<MaxBatch> max_batch;      // with --max-batch

  std::int64_t bytes(MemoryCategory c) const { return peak[static_cast<int>(c)]; }
  std::int64_t sum_of_category_peaks() const;
};

// Builds the model and the amp layer for `properties` (the O1 cast policy included), trains
// config.steps steps (train_step, with its step tally) on one synthetic batch of
// config.batch_size synthetic images of the config's shape (in config.accumulation_steps
// micro-batches), and frees everything before returning. Peaks are reset after setup, so other
// levels measured before in the same process do not show. On a CUDA device it starts by emptying
// the block cache, so the device view is the level's own.
LevelReport measure_level(const MeasureConfig& config, const amp::AmpProperties& properties);

// The properties of each level with the optional --half-dtype applied.
amp::AmpProperties level_properties(amp::OptLevel level, std::optional<DType> half_dtype);

}  // namespace alloy::app
