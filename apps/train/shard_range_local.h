// The contract's shard boundaries, until parallel/zero_shards.h arrives with the ZeRO trainer
// (it replaces this file).
#pragma once

#include <algorithm>
#include <cstdint>

namespace alloy::parallel {

struct ShardRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
};

// s = ceil(total / world); rank r owns [min(total, r*s), min(total, (r+1)*s)).
inline ShardRange shard_range(std::int64_t total, int world, int rank) {
  const std::int64_t size = (total + world - 1) / world;
  return {std::min(total, rank * size), std::min(total, (rank + 1) * size)};
}

}  // namespace alloy::parallel
