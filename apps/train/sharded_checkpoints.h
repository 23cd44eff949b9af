// The training side of sharded checkpoints (core/checkpoint/sharded_checkpoint.h): the shard
// boundaries a ZeRO run uses, checked against a manifest.
#pragma once

#include <string>

#include "core/checkpoint/sharded_checkpoint.h"

namespace alloy::app {

// Throws "checkpoint PATH: ..." naming the first shard whose boundaries are not the ones a run
// of the manifest's world size owns (parallel::shard_range).
void check_shard_boundaries(const checkpoint::Manifest& manifest, const std::string& path);

}  // namespace alloy::app
