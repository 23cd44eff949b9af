// `alloy mem --max-batch`: the largest batch whose training step fits in a CUDA device's
// memory, per opt level. A batch fits when `measure_level` trains it without the allocator
// running out of device memory (OutOfMemory, core/error.h); any other failure is an error.
#pragma once

#include <cstdint>
#include <functional>

#include "amp/opt_level.h"
#include "apps/train/memory_report.h"

namespace alloy::app {

// Searches the largest batch in [1, limit] for which `fits` holds, assuming that a batch fits
// when a larger one does: from `start`, doubles while it fits (or halves while it does not),
// then bisects until the fitting and failing batches are within `tolerance` of the fitting
// one (at least 1 apart). No batch is tried twice.
MaxBatch search_max_batch(std::int64_t start, std::int64_t limit, double tolerance,
                          const std::function<bool(std::int64_t)>& fits);

// The search on config.device for one level, starting from config.batch_size; each probe is a
// one-step `measure_level` of config with the probe's batch, from an empty block cache.
MaxBatch find_max_batch(const MeasureConfig& config, const amp::AmpProperties& properties,
                        std::int64_t limit, double tolerance);

}  // namespace alloy::app
