#include "apps/train/max_batch.h"

#include <algorithm>

#include "core/error.h"

namespace alloy::app {

MaxBatch search_max_batch(std::int64_t start, std::int64_t limit, double tolerance,
                          const std::function<bool(std::int64_t)>& fits) {
  ALLOY_CHECK(limit >= 1, "search_max_batch: the limit must be at least 1, got ", limit);
  ALLOY_CHECK(tolerance >= 0, "search_max_batch: the tolerance must be at least 0, got ",
              tolerance);
  MaxBatch search;
  search.limit = limit;
  const auto probe = [&](std::int64_t batch) {
    ++search.probes;
    return fits(batch);
  };

  std::int64_t fitting = 0;  // largest batch known to fit (0: none yet)
  std::int64_t failing = 0;  // smallest batch known not to fit (0: none yet)
  const std::int64_t first = std::clamp<std::int64_t>(start, 1, limit);
  if (probe(first)) {
    fitting = first;
    while (fitting < limit) {
      const std::int64_t next = std::min(fitting * 2, limit);
      if (!probe(next)) {
        failing = next;
        break;
      }
      fitting = next;
    }
  } else {
    failing = first;
    while (failing > 1) {
      const std::int64_t next = failing / 2;
      if (probe(next)) {
        fitting = next;
        break;
      }
      failing = next;
    }
  }
  if (fitting > 0 && failing > 0) {
    const auto close_enough = [&] {
      const auto gap = static_cast<double>(failing - fitting);
      return failing - fitting <= 1 || gap <= tolerance * static_cast<double>(fitting);
    };
    while (!close_enough()) {
      const std::int64_t middle = fitting + (failing - fitting) / 2;
      if (probe(middle)) {
        fitting = middle;
      } else {
        failing = middle;
      }
    }
  }
  search.largest_fitting = fitting;
  search.smallest_failing = failing;
  return search;
}

MaxBatch find_max_batch(const MeasureConfig& config, const amp::AmpProperties& properties,
                        std::int64_t limit, double tolerance) {
  ALLOY_CHECK(config.device.is_cuda(), "--max-batch searches a CUDA device's memory, not ",
              config.device.str());
  const auto fits = [&](std::int64_t batch) {
    MeasureConfig probe = config;
    probe.batch_size = batch;
    probe.steps = 1;  // the first step allocates all that a step holds; later ones reuse it
    try {
      measure_level(probe, properties);  // starts from an empty block cache
      return true;
    } catch (const OutOfMemory&) {
      return false;
    }
  };
  return search_max_batch(config.batch_size, limit, tolerance, fits);
}

}  // namespace alloy::app
