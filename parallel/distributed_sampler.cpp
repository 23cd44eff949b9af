#include "parallel/distributed_sampler.h"

#include "core/error.h"

namespace alloy::parallel {

std::int64_t local_batch_size(std::int64_t global_batch, int world) {
  ALLOY_CHECK(world >= 1, "local_batch_size: world size ", world);
  if (global_batch % world != 0) {
    usage_fail("--batch-size ", global_batch, " is the global batch and must divide evenly among ",
               "the ", world, " ranks (", global_batch, " is not a multiple of ", world, ")");
  }
  return global_batch / world;
}

data::Sampler training_sampler(std::int64_t dataset_size, std::uint64_t seed, int rank, int world) {
  return data::Sampler(dataset_size, seed, /*shuffle=*/true, rank, world);
}

std::vector<std::int64_t> evaluation_shard(std::int64_t dataset_size, int rank, int world) {
  ALLOY_CHECK(world >= 1 && rank >= 0 && rank < world, "evaluation_shard: rank ", rank,
              " of a world of ", world);
  std::vector<std::int64_t> indices;
  for (std::int64_t index = rank; index < dataset_size; index += world)
    indices.push_back(index);
  return indices;
}

}  // namespace alloy::parallel
