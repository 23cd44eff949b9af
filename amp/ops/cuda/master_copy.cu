#include "amp/ops/cuda/master_copy.h"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/multi_tensor.h"

namespace alloy::amp::cuda {

using alloy::cuda::TensorPairList;

namespace {

__global__ void master_copy_kernel(TensorPairList list) {
  const int t = blockIdx.y;
  const auto* in = static_cast<const float*>(list.input[t]);
  ALLOY_GRID_STRIDE(i, list.count[t]) {
    alloy::cuda::store_any(list.output[t], list.output_dtype[t], i, in[i]);
  }
}

}  // namespace

void copy_masters_to_model(const std::vector<MasterCopyItem>& items, cudaStream_t stream) {
  for (std::size_t begin = 0; begin < items.size(); begin += TensorPairList::kMaxTensors) {
    TensorPairList list{};
    std::int64_t largest = 0;
    for (std::size_t i = begin; i < std::min(items.size(), begin + TensorPairList::kMaxTensors);
         ++i) {
      if (items[i].count == 0) continue;
      list.input[list.size] = items[i].master;
      list.output[list.size] = items[i].model;
      list.count[list.size] = items[i].count;
      list.index[list.size] = static_cast<std::int32_t>(i);
      list.input_dtype[list.size] = DType::f32;
      list.output_dtype[list.size] = items[i].model_dtype;
      largest = std::max(largest, items[i].count);
      ++list.size;
    }
    if (list.size == 0) continue;
    const dim3 grid(std::min(alloy::cuda::grid_for(largest), 1024u),
                    static_cast<unsigned int>(list.size));
    ALLOY_LAUNCH(master_copy_kernel, grid, alloy::cuda::kThreads, 0, stream)(list);
    ALLOY_CUDA_CHECK_LAUNCH("master_copy_kernel on ", list.size, " tensors from #", begin);
  }
}

}  // namespace alloy::amp::cuda
