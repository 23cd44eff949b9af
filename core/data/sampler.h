// Order of examples per epoch. The permutation of epoch e depends only on (seed, e), so a run
// resumed mid-epoch continues with exactly the examples it would have seen. With a world size
// above 1 each rank takes a disjoint, equally sized shard of the permutation.
#pragma once

#include <cstdint>
#include <vector>

namespace alloy::data {

class Sampler {
 public:
  // shuffle=false gives the identity order (evaluation). A rank outside [0, world_size) or a
  // world size below 1 is a UsageError.
  Sampler(std::int64_t dataset_size, std::uint64_t seed, bool shuffle, int rank = 0,
          int world_size = 1);

  // This rank's example indices for `epoch` (0-based), in visiting order: positions rank,
  // rank + world_size, ... of the padded permutation, as PyTorch's DistributedSampler takes.
  std::vector<std::int64_t> epoch_indices(std::int64_t epoch) const;

  std::int64_t dataset_size() const { return dataset_size_; }
  // Examples per rank per epoch (the permutation is padded by wrapping when the dataset
  // does not divide evenly, as PyTorch's DistributedSampler does).
  std::int64_t per_rank() const;

 private:
  std::int64_t dataset_size_;
  std::uint64_t seed_;
  bool shuffle_;
  int rank_;
  int world_size_;
};

}  // namespace alloy::data
