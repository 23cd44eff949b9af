// One-launch grid reductions. Each block of a grid writes its partial result to global memory
// and then takes a ticket from an arrival counter (arrive_last in common.cuh); the block that
// arrives last sees every partial and finishes the reduction itself, in a fixed order, so the
// result is deterministic whichever block happens to come last. That replaces the second,
// tiny launch of a two-kernel reduction. The last block puts the counter back to zero, so a
// counter serves launch after launch with no reset of its own, in eager steps and in replays of
// a captured CUDA graph alike.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/cuda/handles.h"

namespace alloy::cuda {

// One counter per kind of kernel that uses one. Launches sharing a slot must not overlap in
// time: every kernel here runs on its device's one stream, in issue order.
enum class ArrivalSlot : int {
  softmax_loss,
  unscale,
  unscale_mark,  // not a counter: the unscale pass's overflow mark, also zero between calls
  column_sums,
  channel_sums,
  clip_grad_norm,
  layer_norm_params,
  count,  // the number of slots
};

// The slot's counter on the current device. The counters are the device context's
// (core/cuda/context.h): built and zeroed with it, they live for the process, so asking inside
// a CUDA-graph capture is fine.
unsigned int* arrival_counter(ArrivalSlot slot);

// Device memory on the current device for a grid's per-block partials (category workspace).
// It may be released as soon as the kernel using it is launched: the next user of the block
// runs after it on the same stream.
DeviceBuffer reduction_workspace(std::size_t bytes);

}  // namespace alloy::cuda
