#include "core/data/sampler.h"

#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/random.h"

namespace alloy::data {

namespace {

// splitmix64's finaliser: mixing the epoch before combining keeps (seed, epoch) pairs such as
// (1, 0) and (0, 1) from sharing a permutation.
std::uint64_t mix(std::uint64_t value) {
  value += 0x9e3779b97f4a7c15ull;
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ull;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebull;
  return value ^ (value >> 31);
}

}  // namespace

Sampler::Sampler(std::int64_t dataset_size, std::uint64_t seed, bool shuffle, int rank,
                 int world_size)
    : dataset_size_(dataset_size),
      seed_(seed),
      shuffle_(shuffle),
      rank_(rank),
      world_size_(world_size) {
  ALLOY_CHECK(dataset_size >= 0, "sampler: dataset size must be non-negative, got ", dataset_size);
  if (world_size < 1) usage_fail("world size must be at least 1, got ", world_size);
  if (rank < 0 || rank >= world_size) {
    usage_fail("rank ", rank, " is outside the world of ", world_size, " ranks");
  }
}

std::int64_t Sampler::per_rank() const {
  return (dataset_size_ + world_size_ - 1) / world_size_;
}

std::vector<std::int64_t> Sampler::epoch_indices(std::int64_t epoch) const {
  ALLOY_CHECK(epoch >= 0, "sampler: epoch must be non-negative, got ", epoch);
  std::vector<std::int64_t> permutation(static_cast<std::size_t>(dataset_size_));
  std::iota(permutation.begin(), permutation.end(), std::int64_t{0});
  if (shuffle_) {
    Generator generator(mix(seed_ ^ mix(static_cast<std::uint64_t>(epoch))));
    for (std::size_t i = permutation.size(); i > 1; --i) {
      std::swap(permutation[i - 1], permutation[generator.below(i)]);
    }
  }
  // Position p of the padded permutation is permutation[p mod size]; this rank takes
  // positions rank, rank + world_size, ...
  std::vector<std::int64_t> indices(static_cast<std::size_t>(per_rank()));
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const auto position =
        static_cast<std::size_t>(rank_) + k * static_cast<std::size_t>(world_size_);
    indices[k] = permutation[position % permutation.size()];
  }
  return indices;
}

}  // namespace alloy::data
