#include "parallel/zero_shards.h"

#include <algorithm>

#include "core/error.h"

namespace alloy::parallel {

ShardRange shard_range(std::int64_t total, int world, int rank) {
  ALLOY_CHECK(total >= 0 && world >= 1 && rank >= 0 && rank < world, "shard_range: rank ", rank,
              " of ", world, " over ", total, " elements");
  const std::int64_t shard = (total + world - 1) / world;
  return {std::min(total, rank * shard), std::min(total, (rank + 1) * shard)};
}

std::vector<std::int64_t> flat_offsets(const std::vector<std::int64_t>& sizes) {
  std::vector<std::int64_t> offsets{0};
  for (const std::int64_t size : sizes)
    offsets.push_back(offsets.back() + size);
  return offsets;
}

std::vector<std::int64_t> owned_counts(std::int64_t total, int world, std::int64_t begin,
                                       std::int64_t end) {
  ALLOY_CHECK(0 <= begin && begin <= end && end <= total, "owned_counts: [", begin, ", ", end,
              ") of ", total, " elements");
  std::vector<std::int64_t> counts;
  for (int rank = 0; rank < world; ++rank) {
    const ShardRange range = shard_range(total, world, rank);
    counts.push_back(
        std::max<std::int64_t>(0, std::min(end, range.end) - std::max(begin, range.begin)));
  }
  return counts;
}

}  // namespace alloy::parallel
