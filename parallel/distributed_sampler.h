// How a data-parallel job splits its data: the global batch across ranks, the training set
// into per-rank shards, and the test set for a reduced accuracy.
//
// Training shards come from data::Sampler(size, seed, shuffle, rank, world): every rank draws
// the same seeded permutation of epoch e (so they agree without talking) and takes positions
// rank, rank + world, ... of it. The shards are disjoint and together cover the dataset (when
// the world does not divide it, the permutation is padded by wrapping, as PyTorch's
// DistributedSampler does). Batch k of rank r then holds positions r + world * j for
// j in [k * b, (k + 1) * b): together the ranks' k-th batches are exactly the k-th global batch
// of a single process, so 1 and k processes run the same optimisation.
#pragma once

#include <cstdint>
#include <vector>

#include "core/data/sampler.h"

namespace alloy::parallel {

// The examples per rank of a global batch of `global_batch`; a UsageError naming --batch-size
// when it does not divide evenly among `world` ranks.
std::int64_t local_batch_size(std::int64_t global_batch, int world);

// The training order of `rank` for one epoch: its shard of the seeded permutation.
data::Sampler training_sampler(std::int64_t dataset_size, std::uint64_t seed, int rank, int world);

// The test examples `rank` evaluates: positions rank, rank + world, ... of 0 .. size - 1,
// without padding, so that the ranks' shards are disjoint and complete and the sum of their
// correct counts over the dataset size is the exact accuracy.
std::vector<std::int64_t> evaluation_shard(std::int64_t dataset_size, int rank, int world);

}  // namespace alloy::parallel
