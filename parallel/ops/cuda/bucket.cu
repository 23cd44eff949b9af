#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/multi_tensor.h"
#include "parallel/ops/cuda/bucket.h"

namespace alloy::parallel::cuda {

using alloy::cuda::TensorPairList;

namespace {

__global__ void scaled_copy_kernel(TensorPairList list, float factor) {
  const int t = blockIdx.y;
  const void* in = list.input[t];
  void* out = list.output[t];
  const DType from = list.input_dtype[t];
  const DType to = list.output_dtype[t];
  const std::int64_t count = list.count[t];
  if (in == nullptr) {
    ALLOY_GRID_STRIDE(i, count) {
      alloy::cuda::store_any(out, to, i, 0.0f);
    }
  } else if (factor == 1.0f && from == to) {
    // Bits, as the CPU's memcpy: a NaN's payload survives too.
    if (from == DType::f32) {
      ALLOY_GRID_STRIDE(i, count) {
        static_cast<std::uint32_t*>(out)[i] = static_cast<const std::uint32_t*>(in)[i];
      }
    } else {
      ALLOY_GRID_STRIDE(i, count) {
        static_cast<std::uint16_t*>(out)[i] = static_cast<const std::uint16_t*>(in)[i];
      }
    }
  } else {
    ALLOY_GRID_STRIDE(i, count) {
      alloy::cuda::store_any(out, to, i, __fmul_rn(alloy::cuda::load_any(in, from, i), factor));
    }
  }
}

}  // namespace

void scaled_copy(const std::vector<ScaledCopyItem>& items, float factor, cudaStream_t stream) {
  for (std::size_t begin = 0; begin < items.size(); begin += TensorPairList::kMaxTensors) {
    TensorPairList list{};
    std::int64_t largest = 0;
    for (std::size_t i = begin; i < std::min(items.size(), begin + TensorPairList::kMaxTensors);
         ++i) {
      if (items[i].count == 0) continue;
      list.input[list.size] = items[i].from;
      list.output[list.size] = items[i].to;
      list.count[list.size] = items[i].count;
      list.index[list.size] = static_cast<std::int32_t>(i);
      list.input_dtype[list.size] = items[i].from_dtype;
      list.output_dtype[list.size] = items[i].to_dtype;
      largest = std::max(largest, items[i].count);
      ++list.size;
    }
    if (list.size == 0) continue;
    const dim3 grid(std::min(alloy::cuda::grid_for(largest), 1024u),
                    static_cast<unsigned int>(list.size));
    ALLOY_LAUNCH(scaled_copy_kernel, grid, alloy::cuda::kThreads, 0, stream)(list, factor);
    ALLOY_CUDA_CHECK_LAUNCH("scaled_copy_kernel (data-parallel bucket copy) on ", list.size,
                            " tensors from #", begin);
  }
}

}  // namespace alloy::parallel::cuda
