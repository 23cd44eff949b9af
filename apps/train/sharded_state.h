// A rank's part of a sharded (ZeRO stage 1) run's state, for checkpoints: the canonical weights
// and the optimizer's state of the elements its shard owns (parallel/zero_shards.h).
//
// Where to get it: Trainer::data_parallel()->zero() (apps/train/zero.h) while `--zero 1` trains;
// ZeroShard::sharded_state() reads it, ZeroShard::load_sharded_state() overwrites the rank's
// shard from host tensors of the same kinds and range and then rebuilds every rank's full model
// weights from the shards (a collective: every rank calls it). The optimizer's step count is not
// part of it: it is precision().optimizer().steps() / set_steps(), as without sharding.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "parallel/zero_shards.h"

namespace alloy::app {

using parallel::ShardRange;

struct ShardedState {
  std::int64_t total = 0;  // N
  ShardRange range;        // this rank's
  // (kind, values): kind "param" = canonical weights, then the optimizer's state kinds by
  // their existing suffix names ("exp_avg", "exp_avg_sq", "momentum_buffer"); each value a
  // 1-D tensor of range.end - range.begin elements, of the kind's dtype, on the training device.
  // "param" is f32 unless every canonical weight is half (O3 without fp32 batch norm), then
  // that half dtype; the optimizer's kinds are f32.
  std::vector<std::pair<std::string, Tensor>> flat;
};

}  // namespace alloy::app
