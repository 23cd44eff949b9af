#include <algorithm>

#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/ema_update.h"
#include "core/ops/cuda/tensor_list.cuh"

namespace alloy::cuda {

namespace {

// Per tensor: the f32 average and the value it follows.
using List = TensorList<2>;
constexpr int kAverage = 0, kValue = 1;

// Tensors larger than this many blocks are strided over (list_blocks_for, multi_tensor.h), as the
// optimizer updates do.
constexpr std::int64_t kMaxBlocksPerTensor = 1024;

// cpu::ema_update's arithmetic: the product rounded on its own (__fmul_rn is never contracted
// into an fma), then one fused multiply-add.
template <class V>
__device__ __forceinline__ void update(float* average, const void* value_data, std::int64_t first,
                                       std::int64_t stride, std::int64_t count, float decay,
                                       float one_minus_decay) {
  const V* value = static_cast<const V*>(value_data);
  for (std::int64_t i = first; i < count; i += stride)
    average[i] = __fmaf_rn(decay, average[i], __fmul_rn(one_minus_decay, widen(value[i])));
}

// Tensor t owns blocks [block_start[t], block_start[t + 1]); skip is read here, at every replay.
__global__ void ema_kernel(List list, float decay, float one_minus_decay, const float* skip,
                           const std::int32_t* updates) {
  if (skip != nullptr && !(*skip == 0.0f)) return;
  if (updates != nullptr) {  // as the CPU: the warmed-up decay, and 1 - it rounded once
    decay = warmed_up_decay(decay, *updates);
    one_minus_decay = 1.0f - decay;
  }
  const ListSlice s = slice_of_block(list);
  const int t = s.tensor;
  auto* average = static_cast<float*>(list.data[kAverage][t]);
  const void* value = list.data[kValue][t];
  // One dtype per block, so the switch costs no divergence.
  switch (list.dtype[kValue][t]) {
    case DType::f16:
      return update<__half>(average, value, s.first, s.stride, s.count, decay, one_minus_decay);
    case DType::bf16:
      return update<__nv_bfloat16>(average, value, s.first, s.stride, s.count, decay,
                                   one_minus_decay);
    default:
      return update<float>(average, value, s.first, s.stride, s.count, decay, one_minus_decay);
  }
}

}  // namespace

void ema_update(const std::vector<EmaBuffers>& tensors, float decay, const float* skip,
                const std::int32_t* updates, cudaStream_t stream) {
  // Rounded once on the host, as cpu::ema_update does.
  const float one_minus_decay = 1.0f - decay;
  const auto launches = split_tensor_lists<List>(
      tensors.size(), kMaxBlocksPerTensor, false, [&](List& list, int k, std::size_t i) {
        list.data[kAverage][k] = tensors[i].average;
        // The kernel only reads the value; the list's slots are untyped.
        list.data[kValue][k] = const_cast<void*>(tensors[i].value);
        list.dtype[kAverage][k] = DType::f32;
        list.dtype[kValue][k] = tensors[i].value_dtype;
        return tensors[i].count;
      });
  for (const ListLaunch<List>& launch : launches) {
    ALLOY_LAUNCH(ema_kernel, launch.blocks, kThreads, 0, stream)
    (launch.list, decay, one_minus_decay, skip, updates);
    ALLOY_CUDA_CHECK_LAUNCH("ema_kernel on ", launch.list.size, " tensors (", launch.blocks,
                            " blocks)");
  }
}

}  // namespace alloy::cuda
