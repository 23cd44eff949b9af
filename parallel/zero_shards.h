// The flat parameter space of ZeRO stage 1 (`alloy train --zero 1`) and its shards.
//
// The canonical parameters (amp::MixedPrecision::canonical_parameters(), registration order)
// concatenated element by element form one flat space of N elements; parameter i starts at the
// sum of the sizes of parameters 0 .. i-1. With W ranks, shards hold s = ceil(N / W) elements and
// rank r owns [min(N, r*s), min(N, (r+1)*s)): the fp32 master weights and the optimizer's state of
// those elements live on that rank only. Checkpoints of sharded runs split the same way.
#pragma once

#include <cstdint>
#include <vector>

namespace alloy::parallel {

struct ShardRange {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};

// Rank `rank`'s range of a flat space of `total` elements over `world` ranks (Error unless
// total >= 0 and 0 <= rank < world).
ShardRange shard_range(std::int64_t total, int world, int rank);

// Where each of `sizes` (element counts, in flat order) starts in the flat space; one more entry
// at the end: the total.
std::vector<std::int64_t> flat_offsets(const std::vector<std::int64_t>& sizes);

// How many of the elements [begin, end) of the flat space each rank owns, by rank.
std::vector<std::int64_t> owned_counts(std::int64_t total, int world, std::int64_t begin,
                                       std::int64_t end);

}  // namespace alloy::parallel
