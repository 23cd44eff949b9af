#include "amp/ops/cuda/scaler_step.cuh"
#include "amp/ops/cuda/unscale.h"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/last_block.h"
#include "core/ops/cuda/multi_tensor.h"

namespace alloy::amp::cuda {

using alloy::cuda::ArrivalSlot;
using alloy::cuda::TensorPairList;

namespace {

// The overflow mark: 0 for none, else kNoMark - (the smallest overflowing item index), so that
// atomicMax keeps the first one and zero (the state between calls) means none.
constexpr unsigned int kNoMark = 0x7fffffffu;

constexpr unsigned int kMaxBlocksPerTensor = 1024;

// Where the pass leaves its verdict, and what its last block does with it.
struct Verdict {
  float* found_inf;
  std::int32_t* first_overflow;
  unsigned int* arrivals;  // this launch's arrival counter
  unsigned int* mark;      // the overflow mark, zero between calls
  bool finish;             // the call's last launch: write the verdict (and update the scale)
  bool update;             // run the scaler's state machine after the verdict
  ScalerStep step;
};

// A compact grid: tensor t owns blocks [first_block[t], first_block[t + 1]), as many as its
// size needs (up to a cap), so a model's small tensors (biases) do not each get as many
// blocks as its largest, all of which would take an arrival ticket for nothing.
struct BlockMap {
  int first_block[TensorPairList::kMaxTensors + 1];
};

// The tensor owning block `block`: the last t with first_block[t] <= block (binary search).
__device__ int owner_of(const BlockMap& map, int tensors, int block) {
  int low = 0, high = tensors - 1;
  while (low < high) {
    const int middle = (low + high + 1) / 2;
    if (map.first_block[middle] <= block) {
      low = middle;
    } else {
      high = middle - 1;
    }
  }
  return low;
}

// Each block strides over its tensor's elements with that tensor's other blocks. The inverse
// is formed as the CPU forms it: 1.0f / scale, then one multiply per element. Every block
// reads the scale before it takes its arrival ticket, so the last block may then change it.
__global__ void unscale_kernel(TensorPairList list, BlockMap map, const float* scale,
                               Verdict verdict) {
  const int block = static_cast<int>(blockIdx.x);
  const int t = list.size > 0 ? owner_of(map, list.size, block) : 0;
  const float inverse = 1.0f / *scale;
  const std::int64_t count = list.size > 0 ? list.count[t] : 0;  // size 0: the verdict only
  bool bad = false;
  if (count > 0) {
    const void* in = list.input[t];
    void* out = list.output[t];
    const DType in_dtype = list.input_dtype[t];
    const DType out_dtype = list.output_dtype[t];
    const std::int64_t stride =
        static_cast<std::int64_t>(map.first_block[t + 1] - map.first_block[t]) * blockDim.x;
    for (std::int64_t i =
             static_cast<std::int64_t>(block - map.first_block[t]) * blockDim.x + threadIdx.x;
         i < count; i += stride) {
      const float value = alloy::cuda::load_any(in, in_dtype, i);
      bad |= !isfinite(value);
      alloy::cuda::store_any(out, out_dtype, i, value * inverse);
    }
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) {
    atomicMax(verdict.mark, kNoMark - static_cast<unsigned int>(list.index[t]));
  }
  if (!alloy::cuda::arrive_last(verdict.arrivals) || !verdict.finish || threadIdx.x != 0) return;
  const unsigned int mark = atomicExch(verdict.mark, 0u);  // read, and reset for the next call
  const bool found = mark != 0;
  const std::int32_t first = found ? static_cast<std::int32_t>(kNoMark - mark) : -1;
  *verdict.found_inf = found ? 1.0f : 0.0f;
  *verdict.first_overflow = first;
  if (verdict.update) run_scaler_step(verdict.step, found, first);
}

}  // namespace

void unscale_and_check(const std::vector<UnscaleItem>& items, const float* scale, float* found_inf,
                       std::int32_t* first_overflow, const ScalerStep* update,
                       cudaStream_t stream) {
  // The lists of the launches: 48 non-empty items each, and at least one launch (with no
  // tensors if need be), whose last block writes the verdict.
  std::vector<TensorPairList> lists(1, TensorPairList{});
  std::vector<BlockMap> maps(1, BlockMap{});
  for (std::size_t i = 0; i < items.size(); ++i) {
    const UnscaleItem& item = items[i];
    if (item.count == 0) continue;
    if (lists.back().size == TensorPairList::kMaxTensors) {
      lists.push_back(TensorPairList{});
      maps.push_back(BlockMap{});
    }
    TensorPairList& list = lists.back();
    BlockMap& map = maps.back();
    // Blocks to fill the device for a large tensor, one for a bias.
    map.first_block[list.size + 1] =
        map.first_block[list.size] +
        static_cast<int>(std::min(alloy::cuda::grid_for(item.count), kMaxBlocksPerTensor));
    list.input[list.size] = item.grad;
    list.output[list.size] = item.output;
    list.count[list.size] = item.count;
    list.index[list.size] = static_cast<std::int32_t>(i);
    list.input_dtype[list.size] = item.grad_dtype;
    list.output_dtype[list.size] = item.output_dtype;
    ++list.size;
  }
  Verdict verdict{};
  verdict.found_inf = found_inf;
  verdict.first_overflow = first_overflow;
  verdict.arrivals = alloy::cuda::arrival_counter(ArrivalSlot::unscale);
  verdict.mark = alloy::cuda::arrival_counter(ArrivalSlot::unscale_mark);
  if (update != nullptr) {
    verdict.update = true;
    verdict.step = *update;
  }
  for (std::size_t l = 0; l < lists.size(); ++l) {
    verdict.finish = l + 1 == lists.size();
    const auto blocks = static_cast<unsigned int>(std::max(maps[l].first_block[lists[l].size], 1));
    ALLOY_LAUNCH(unscale_kernel, blocks, alloy::cuda::kThreads, 0, stream)
    (lists[l], maps[l], scale, verdict);
    ALLOY_CUDA_CHECK_LAUNCH("unscale_kernel on ", lists[l].size, " gradients (launch ", l + 1,
                            " of ", lists.size(), ")");
  }
}

}  // namespace alloy::amp::cuda
