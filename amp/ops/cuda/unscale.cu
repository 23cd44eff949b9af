#include <climits>

#include "amp/ops/cuda/unscale.h"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/multi_tensor.h"

namespace alloy::amp::cuda {

using alloy::cuda::TensorPairList;

namespace {

__global__ void reset_kernel(float* found_inf, std::int32_t* first_overflow) {
  *found_inf = 0.0f;
  *first_overflow = INT_MAX;
}

__global__ void finish_kernel(float* found_inf, std::int32_t* first_overflow) {
  if (*first_overflow == INT_MAX) {
    *first_overflow = -1;
    *found_inf = 0.0f;
  } else {
    *found_inf = 1.0f;
  }
}

// blockIdx.y picks the tensor; blocks along x stride over its elements. The inverse is formed
// as the CPU forms it: 1.0f / scale, then one multiply per element.
__global__ void unscale_kernel(TensorPairList list, const float* scale,
                               std::int32_t* first_overflow) {
  const int t = blockIdx.y;
  const float inverse = 1.0f / *scale;
  const std::int64_t count = list.count[t];
  const void* in = list.input[t];
  void* out = list.output[t];
  const DType in_dtype = list.input_dtype[t];
  const DType out_dtype = list.output_dtype[t];
  bool bad = false;
  ALLOY_GRID_STRIDE(i, count) {
    const float value = alloy::cuda::load_any(in, in_dtype, i);
    bad |= !isfinite(value);
    alloy::cuda::store_any(out, out_dtype, i, value * inverse);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicMin(first_overflow, list.index[t]);
}

}  // namespace

void unscale_and_check(const std::vector<UnscaleItem>& items, const float* scale, float* found_inf,
                       std::int32_t* first_overflow, cudaStream_t stream) {
  reset_kernel<<<1, 1, 0, stream>>>(found_inf, first_overflow);
  ALLOY_CUDA_CHECK_LAUNCH("unscale reset_kernel");
  for (std::size_t begin = 0; begin < items.size(); begin += TensorPairList::kMaxTensors) {
    TensorPairList list{};
    std::int64_t largest = 0;
    for (std::size_t i = begin; i < std::min(items.size(), begin + TensorPairList::kMaxTensors);
         ++i) {
      const UnscaleItem& item = items[i];
      if (item.count == 0) continue;
      list.input[list.size] = item.grad;
      list.output[list.size] = item.output;
      list.count[list.size] = item.count;
      list.index[list.size] = static_cast<std::int32_t>(i);
      list.input_dtype[list.size] = item.grad_dtype;
      list.output_dtype[list.size] = item.output_dtype;
      largest = std::max(largest, item.count);
      ++list.size;
    }
    if (list.size == 0) continue;
    const dim3 grid(std::min(alloy::cuda::grid_for(largest), 1024u),
                    static_cast<unsigned int>(list.size));
    unscale_kernel<<<grid, alloy::cuda::kThreads, 0, stream>>>(list, scale, first_overflow);
    ALLOY_CUDA_CHECK_LAUNCH("unscale_kernel on ", list.size, " gradients from #", begin);
  }
  finish_kernel<<<1, 1, 0, stream>>>(found_inf, first_overflow);
  ALLOY_CUDA_CHECK_LAUNCH("unscale finish_kernel");
}

}  // namespace alloy::amp::cuda
