#include <algorithm>

#include "core/ops/cuda/clip_grad_norm.h"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/last_block.h"
#include "core/ops/cuda/tensor_list.cuh"

namespace alloy::cuda {

namespace {

using List = TensorList<1>;

// A large tensor's blocks stride over it (list_blocks_for, multi_tensor.h), so the partials stay
// few enough for the last block to sum quickly.
constexpr std::int64_t kMaxBlocksPerTensor = 256;

// What the call's last block does with the partials.
struct Finish {
  unsigned int* arrivals;
  bool last_launch;       // the call's last launch: combine every partial and write the results
  std::int32_t partials;  // partials of the whole call (every launch's blocks)
  float max_norm;
  float* norm;
  float* coefficient;
  ClipTally* tally;      // or null
  const float* unscale;  // or null: 1
};

// This thread's squares of its block's share of tensor t times unscale (the product rounded to
// f32, as on the CPU), in double.
template <class T>
__device__ double thread_squares(const void* data, std::int64_t first, std::int64_t stride,
                                 std::int64_t count, float unscale) {
  const T* x = static_cast<const T*>(data);
  double sum = 0.0;
  for (std::int64_t i = first; i < count; i += stride) {
    const double value = __fmul_rn(widen(x[i]), unscale);
    sum += value * value;
  }
  return sum;
}

// The order of every addition is fixed by the launch shape (each thread's elements in order,
// then block_sum's tree; the last block's loop over the partials, then its tree), which depends
// only on the tensors' sizes: the same bits at every run.
__global__ void norm_kernel(List list, double* partials, std::int32_t partial_offset,
                            Finish finish) {
  const auto block = static_cast<std::int32_t>(blockIdx.x);
  // A list with no elements (a call with none) runs one block, for the results only.
  const ListSlice s = slice_of_block(list);
  const void* data = list.data[0][s.tensor];
  const float unscale = finish.unscale == nullptr ? 1.0f : *finish.unscale;
  double sum = 0.0;
  switch (list.dtype[0][s.tensor]) {
    case DType::f16:
      sum = thread_squares<__half>(data, s.first, s.stride, s.count, unscale);
      break;
    case DType::bf16:
      sum = thread_squares<__nv_bfloat16>(data, s.first, s.stride, s.count, unscale);
      break;
    default:
      sum = thread_squares<float>(data, s.first, s.stride, s.count, unscale);
      break;
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) partials[partial_offset + block] = sum;
  if (!arrive_last(finish.arrivals) || !finish.last_launch) return;
  double partial = 0.0;
  for (std::int32_t r = threadIdx.x; r < finish.partials; r += blockDim.x)
    partial += __ldcg(partials + r);
  const double total = block_sum(partial);
  // cpu::clip_grad_norm's arithmetic, the same function (IEEE division: nvcc's default
  // without --use_fast_math).
  if (threadIdx.x == 0) {
    finish_clip_grad_norm(total, finish.max_norm, finish.norm, finish.coefficient, finish.tally);
  }
}

}  // namespace

void clip_grad_norm(const std::vector<NormItem>& items, float max_norm, float* norm,
                    float* coefficient, ClipTally* tally, const float* unscale,
                    cudaStream_t stream) {
  // At least one launch (with no tensors if need be), whose last block writes the results.
  const auto launches = split_tensor_lists<List>(
      items.size(), kMaxBlocksPerTensor, true, [&](List& list, int k, std::size_t i) {
        // The kernel only reads the gradient; the list's slots are untyped.
        list.data[0][k] = const_cast<void*>(items[i].data);
        list.dtype[0][k] = items[i].dtype;
        return items[i].count;
      });
  // One partial per block of the call, every launch's.
  const std::int32_t partials = launches.back().first_block + launches.back().blocks;
  // Released when the launches are queued: the next user of the memory runs after them on the
  // same stream.
  const DeviceBuffer workspace = reduction_workspace(sizeof(double) * partials);
  Finish finish{arrival_counter(ArrivalSlot::clip_grad_norm),
                false,
                partials,
                max_norm,
                norm,
                coefficient,
                tally,
                unscale};
  for (std::size_t l = 0; l < launches.size(); ++l) {
    finish.last_launch = launches[l].last;
    ALLOY_LAUNCH(norm_kernel, launches[l].blocks, kThreads, 0, stream)
    (launches[l].list, workspace.as<double>(), launches[l].first_block, finish);
    ALLOY_CUDA_CHECK_LAUNCH("norm_kernel on ", launches[l].list.size, " gradients (launch ", l + 1,
                            " of ", launches.size(), ")");
  }
}

}  // namespace alloy::cuda
