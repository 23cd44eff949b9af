#include "amp/ops/cuda/master_copy.h"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/tensor_list.cuh"

namespace alloy::amp::cuda {

namespace {

// Per tensor: the f32 master and the model's copy.
using List = alloy::cuda::TensorList<2>;
constexpr int kMaster = 0, kModel = 1;

constexpr std::int64_t kMaxBlocksPerTensor = 1024;

__global__ void master_copy_kernel(List list) {
  const alloy::cuda::ListSlice s = alloy::cuda::slice_of_block(list);
  const auto* in = static_cast<const float*>(list.data[kMaster][s.tensor]);
  void* out = list.data[kModel][s.tensor];
  const DType out_dtype = list.dtype[kModel][s.tensor];
  for (std::int64_t i = s.first; i < s.count; i += s.stride)
    alloy::cuda::store_any(out, out_dtype, i, in[i]);
}

}  // namespace

void copy_masters_to_model(const std::vector<MasterCopyItem>& items, cudaStream_t stream) {
  const auto launches = alloy::cuda::split_tensor_lists<List>(
      items.size(), kMaxBlocksPerTensor, false, [&](List& list, int k, std::size_t i) {
        // The kernel only reads the master; the list's slots are untyped.
        list.data[kMaster][k] = const_cast<float*>(items[i].master);
        list.data[kModel][k] = items[i].model;
        list.dtype[kMaster][k] = DType::f32;
        list.dtype[kModel][k] = items[i].model_dtype;
        return items[i].count;
      });
  for (const auto& launch : launches) {
    ALLOY_LAUNCH(master_copy_kernel, launch.blocks, alloy::cuda::kThreads, 0, stream)
    (launch.list);
    ALLOY_CUDA_CHECK_LAUNCH("master_copy_kernel on ", launch.list.size, " tensors (", launch.blocks,
                            " blocks)");
  }
}

}  // namespace alloy::amp::cuda
