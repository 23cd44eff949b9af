// Sharded checkpoints written from a plain state by one process, as `world` ranks would write
// them, for the tests of the sharded format and of the commands that read it.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/checkpoint/sharded_checkpoint.h"

namespace alloy::checkpoint::test {

// The contract's shards: s = ceil(N / W); rank r holds [min(N, r*s), min(N, (r+1)*s)).
inline std::pair<std::int64_t, std::int64_t> shard_bounds(std::int64_t total, std::int64_t world,
                                                          std::int64_t rank) {
  const std::int64_t size = (total + world - 1) / world;
  return {std::min(total, rank * size), std::min(total, (rank + 1) * size)};
}

// The kinds of `state`'s optimizer state that every parameter has ("<name>.<kind>").
inline std::vector<std::string> flat_kinds_of(const CheckpointState& state) {
  std::vector<std::string> kinds{kParamKind};
  if (state.parameters.empty()) return kinds;
  const std::string prefix = state.parameters[0].name + ".";
  for (const NamedTensor& tensor : state.optimizer_state) {
    if (tensor.name.rfind(prefix, 0) != 0) continue;
    const std::string kind = tensor.name.substr(prefix.size());
    const bool everywhere =
        std::all_of(state.parameters.begin(), state.parameters.end(), [&](const NamedTensor& p) {
          return find_tensor(state.optimizer_state, p.name + "." + kind) != nullptr;
        });
    if (everywhere) kinds.push_back(kind);
  }
  return kinds;
}

// Writes `state` as a sharded checkpoint of `world` ranks into `step_dir`: every rank's shard,
// each entry passed through its text form (as ranks send it to rank 0), then the manifest.
// `ends`, when given, are the shards' ends in place of the contract's.
inline Manifest write_sharded_state(const std::string& step_dir, const CheckpointState& state,
                                    std::int64_t world,
                                    std::int64_t chunk_elements = kDefaultChunkElements,
                                    const std::vector<std::int64_t>& ends = {}) {
  std::vector<TensorSpec> specs;
  for (const NamedTensor& p : state.parameters)
    specs.push_back({p.name, p.shape});
  Manifest manifest;
  manifest.step = state.step;
  manifest.world_size = world;
  manifest.chunk_elements = chunk_elements;
  manifest.parameters = flat_layout(specs);
  for (const FlatParameter& p : manifest.parameters)
    manifest.total += p.numel;
  const std::vector<std::string> kinds = flat_kinds_of(state);
  for (const std::string& kind : kinds)
    manifest.kinds.push_back({kind, DType::f32});

  CheckpointState shared = state;
  shared.world_size = world;
  shared.parameters.clear();
  shared.optimizer_state.clear();
  for (const NamedTensor& tensor : state.optimizer_state) {
    const bool flat = std::any_of(kinds.begin() + 1, kinds.end(), [&](const std::string& kind) {
      return std::any_of(state.parameters.begin(), state.parameters.end(),
                         [&](const NamedTensor& p) { return tensor.name == p.name + "." + kind; });
    });
    if (!flat) shared.optimizer_state.push_back(tensor);
  }
  for (std::int64_t rank = 0; rank < world; ++rank) {
    auto [begin, end] = shard_bounds(manifest.total, world, rank);
    if (!ends.empty()) {
      begin = rank == 0 ? 0 : ends[static_cast<std::size_t>(rank - 1)];
      end = ends[static_cast<std::size_t>(rank)];
    }
    std::vector<FlatRange> ranges;
    for (const std::string& kind : kinds) {
      ranges.push_back(
          {kind, DType::f32, flat_range_of_state(state, manifest.parameters, kind, begin, end)});
    }
    const ShardEntry entry =
        write_shard(step_dir, rank, begin, end, ranges, shared, chunk_elements);
    manifest.shards.push_back(decode_shard_entry(encode_shard_entry(entry)));
  }
  write_manifest(step_dir, manifest);
  return manifest;
}

}  // namespace alloy::checkpoint::test
