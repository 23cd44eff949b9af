#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/tensor_list.cuh"
#include "parallel/ops/cuda/bucket.h"

namespace alloy::parallel::cuda {

namespace {

// Per tensor: where it is read from (null: zeros) and where it is written.
using List = alloy::cuda::TensorList<2>;
constexpr int kFrom = 0, kTo = 1;

constexpr std::int64_t kMaxBlocksPerTensor = 1024;

__global__ void scaled_copy_kernel(List list, float factor) {
  const alloy::cuda::ListSlice s = alloy::cuda::slice_of_block(list);
  const void* in = list.data[kFrom][s.tensor];
  void* out = list.data[kTo][s.tensor];
  const DType from = list.dtype[kFrom][s.tensor];
  const DType to = list.dtype[kTo][s.tensor];
  if (in == nullptr) {
    for (std::int64_t i = s.first; i < s.count; i += s.stride)
      alloy::cuda::store_any(out, to, i, 0.0f);
  } else if (factor == 1.0f && from == to) {
    // Bits, as the CPU's memcpy: a NaN's payload survives too.
    if (from == DType::f32) {
      for (std::int64_t i = s.first; i < s.count; i += s.stride)
        static_cast<std::uint32_t*>(out)[i] = static_cast<const std::uint32_t*>(in)[i];
    } else {
      for (std::int64_t i = s.first; i < s.count; i += s.stride)
        static_cast<std::uint16_t*>(out)[i] = static_cast<const std::uint16_t*>(in)[i];
    }
  } else {
    for (std::int64_t i = s.first; i < s.count; i += s.stride)
      alloy::cuda::store_any(out, to, i, __fmul_rn(alloy::cuda::load_any(in, from, i), factor));
  }
}

}  // namespace

void scaled_copy(const std::vector<ScaledCopyItem>& items, float factor, cudaStream_t stream) {
  const auto launches = alloy::cuda::split_tensor_lists<List>(
      items.size(), kMaxBlocksPerTensor, false, [&](List& list, int k, std::size_t i) {
        // The kernel only reads `from`; the list's slots are untyped.
        list.data[kFrom][k] = const_cast<void*>(items[i].from);
        list.data[kTo][k] = items[i].to;
        list.dtype[kFrom][k] = items[i].from_dtype;
        list.dtype[kTo][k] = items[i].to_dtype;
        return items[i].count;
      });
  for (const auto& launch : launches) {
    ALLOY_LAUNCH(scaled_copy_kernel, launch.blocks, alloy::cuda::kThreads, 0, stream)
    (launch.list, factor);
    ALLOY_CUDA_CHECK_LAUNCH("scaled_copy_kernel (data-parallel bucket copy) on ", launch.list.size,
                            " tensors (", launch.blocks, " blocks)");
  }
}

}  // namespace alloy::parallel::cuda
