// Multi-tensor launches (as in Apex's multi_tensor_apply): up to kMaxTensors tensors' pointers,
// sizes and dtypes travel in one kernel argument, so a pass over every gradient of a model is
// a handful of launches with no host-to-device copy of metadata, and capturable in a graph.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace alloy::cuda {

struct TensorPairList {
  // 48 entries keep the argument well under the 4 KiB kernel-parameter limit of older drivers.
  static constexpr int kMaxTensors = 48;
  const void* input[kMaxTensors];
  void* output[kMaxTensors];
  std::int64_t count[kMaxTensors];
  std::int32_t index[kMaxTensors];  // the tensor's position in the caller's full list
  DType input_dtype[kMaxTensors];
  DType output_dtype[kMaxTensors];
  int size;
};

// Tensors of Depth same-sized buffers each (a parameter, its gradient, its optimizer state)
// over a one-dimensional grid with no idle blocks: tensor t owns blocks [block_start[t],
// block_start[t + 1]), so small tensors get few blocks and the launch has exactly as many as
// the work needs (a grid of tensors x largest-tensor blocks would be mostly empty blocks).
template <int Depth>
struct TensorList {
  // 64 covers resnet18's 62 parameters in one launch and keeps Depth 4 within 4 KiB.
  static constexpr int kMaxTensors = 64;
  void* data[Depth][kMaxTensors];
  std::int64_t count[kMaxTensors];
  std::int32_t block_start[kMaxTensors + 1];
  DType dtype[Depth][kMaxTensors];
  int size;
};
static_assert(sizeof(TensorList<4>) <= 4096, "kernel arguments are limited to 4 KiB");

}  // namespace alloy::cuda
