// Multi-tensor launches (as in Apex's multi_tensor_apply): up to kMaxTensors tensors' pointers,
// sizes and dtypes travel in one kernel argument, so a pass over every gradient of a model is
// a handful of launches with no host-to-device copy of metadata, and capturable in a graph.
// split_tensor_lists is the one place that cuts a call's tensors into those launches; each op
// only says what goes in a tensor's slots and what its kernel does with a block's share.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace alloy::cuda {

// Tensors of Depth same-sized buffers each (a parameter, its gradient, its optimizer state)
// over a one-dimensional grid with no idle blocks: tensor t owns blocks [block_start[t],
// block_start[t + 1]), so small tensors get few blocks and the launch has exactly as many as
// the work needs (a grid of tensors x largest-tensor blocks would be mostly empty blocks).
template <int Depth>
struct TensorList {
  // 64 covers resnet18's 62 parameters in one launch and keeps Depth 5 within 4 KiB.
  static constexpr int kMaxTensors = 64;
  void* data[Depth][kMaxTensors];
  std::int64_t count[kMaxTensors];
  std::int32_t block_start[kMaxTensors + 1];
  // The tensor's position in the call's list, unless the op numbers its tensors otherwise.
  std::uint32_t index[kMaxTensors];
  DType dtype[Depth][kMaxTensors];
  int size;
};
static_assert(sizeof(TensorList<5>) <= 4096, "kernel arguments are limited to 4 KiB");

// About four elements per thread of a 256-thread block (kThreads, common.cuh).
constexpr std::int64_t kListElementsPerBlock = 1024;

// The blocks a tensor of `count` elements gets: enough for four elements per thread, at most
// `max_blocks` (a larger tensor's blocks stride over it, so the grid stays within gridDim.x's
// limit and per-block partials or tickets stay few).
inline std::int32_t list_blocks_for(std::int64_t count, std::int64_t max_blocks) {
  return static_cast<std::int32_t>(
      std::min((count + kListElementsPerBlock - 1) / kListElementsPerBlock, max_blocks));
}

// One launch of a multi-tensor call.
template <class List>
struct ListLaunch {
  List list;
  // At least 1: a list whose tensors are all empty still runs one block, with nothing to do
  // but what the kernel does once per block (take a ticket, advance a count).
  std::int32_t blocks;
  std::int32_t first_block;  // the blocks of the call's earlier launches
  bool last;                 // the call's last launch, queued after every other
};

// The launches of a call over `tensors` tensors: consecutive runs of up to List::kMaxTensors,
// in order, empty tensors included (they own no blocks). fill(list, k, i) puts tensor i in
// slot k (data and dtypes; index is i unless it sets another) and returns its element count.
// With `at_least_one`, a call with no tensors still gets a launch, of an empty list, for
// kernels whose last block writes the call's results.
template <class List, class Fill>
std::vector<ListLaunch<List>> split_tensor_lists(std::size_t tensors,
                                                 std::int64_t max_blocks_per_tensor,
                                                 bool at_least_one, Fill&& fill) {
  std::vector<ListLaunch<List>> launches;
  std::int32_t first_block = 0;
  for (std::size_t begin = 0; begin < tensors || (at_least_one && launches.empty());
       begin += List::kMaxTensors) {
    ListLaunch<List>& launch = launches.emplace_back();  // zeroed
    List& list = launch.list;
    std::int32_t blocks = 0;
    for (std::size_t i = begin; i < std::min(tensors, begin + List::kMaxTensors); ++i) {
      const int k = list.size++;
      list.index[k] = static_cast<std::uint32_t>(i);
      list.count[k] = fill(list, k, i);
      list.block_start[k] = blocks;
      blocks += list_blocks_for(list.count[k], max_blocks_per_tensor);
    }
    list.block_start[list.size] = blocks;
    launch.blocks = std::max(blocks, std::int32_t{1});
    launch.first_block = first_block;
    first_block += launch.blocks;
  }
  if (!launches.empty()) launches.back().last = true;
  return launches;
}

}  // namespace alloy::cuda
