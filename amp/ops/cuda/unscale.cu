#include "amp/ops/cuda/scaler_step.cuh"
#include "amp/ops/cuda/unscale.h"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/last_block.h"
#include "core/ops/cuda/tensor_list.cuh"

namespace alloy::amp::cuda {

using alloy::cuda::ArrivalSlot;

namespace {

// Per tensor: the gradient and where its unscaled values go (it may be the gradient); index is
// the item's position, which the overflow mark reports.
using List = alloy::cuda::TensorList<2>;
constexpr int kGrad = 0, kOutput = 1;

// The overflow mark: 0 for none, else kNoMark - (the smallest overflowing item index), so that
// atomicMax keeps the first one and zero (the state between calls) means none.
constexpr unsigned int kNoMark = 0x7fffffffu;

constexpr std::int64_t kMaxBlocksPerTensor = 1024;

// Where the pass leaves its verdict, and what its last block does with it.
struct Verdict {
  float* found_inf;
  std::int32_t* first_overflow;
  float* inverse_scale;    // or null
  unsigned int* arrivals;  // this launch's arrival counter
  unsigned int* mark;      // the overflow mark, zero between calls
  bool finish;             // the call's last launch: write the verdict (and update the scale)
  bool update;             // run the scaler's state machine after the verdict
  ScalerStep step;
};

// Each block strides over its tensor's elements with that tensor's other blocks. The inverse
// is formed as the CPU forms it: 1.0f / scale, then one multiply per element (none where the
// output is null: the check alone). Every block reads the scale before it takes its arrival
// ticket, so the last block may then change it, after writing the inverse it read.
__global__ void unscale_kernel(List list, const float* scale, Verdict verdict) {
  const alloy::cuda::ListSlice s = alloy::cuda::slice_of_block(list);
  const float inverse = 1.0f / *scale;
  bool bad = false;
  if (s.count > 0) {
    const void* in = list.data[kGrad][s.tensor];
    void* out = list.data[kOutput][s.tensor];
    const DType in_dtype = list.dtype[kGrad][s.tensor];
    const DType out_dtype = list.dtype[kOutput][s.tensor];
    if (out == nullptr) {
      for (std::int64_t i = s.first; i < s.count; i += s.stride)
        bad |= !isfinite(alloy::cuda::load_any(in, in_dtype, i));
    } else {
      for (std::int64_t i = s.first; i < s.count; i += s.stride) {
        const float value = alloy::cuda::load_any(in, in_dtype, i);
        bad |= !isfinite(value);
        alloy::cuda::store_any(out, out_dtype, i, value * inverse);
      }
    }
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) {
    atomicMax(verdict.mark, kNoMark - list.index[s.tensor]);
  }
  if (!alloy::cuda::arrive_last(verdict.arrivals) || !verdict.finish || threadIdx.x != 0) return;
  const unsigned int mark = atomicExch(verdict.mark, 0u);  // read, and reset for the next call
  const bool found = mark != 0;
  const std::int32_t first = found ? static_cast<std::int32_t>(kNoMark - mark) : -1;
  *verdict.found_inf = found ? 1.0f : 0.0f;
  *verdict.first_overflow = first;
  if (verdict.inverse_scale != nullptr) *verdict.inverse_scale = inverse;
  if (verdict.update) run_scaler_step(verdict.step, found, first);
}

}  // namespace

void unscale_and_check(const std::vector<UnscaleItem>& items, const float* scale, float* found_inf,
                       std::int32_t* first_overflow, float* inverse_scale, const ScalerStep* update,
                       cudaStream_t stream) {
  // At least one launch (with no tensors if need be), whose last block writes the verdict.
  const auto launches = alloy::cuda::split_tensor_lists<List>(
      items.size(), kMaxBlocksPerTensor, true, [&](List& list, int k, std::size_t i) {
        // The kernel only reads the gradient; the list's slots are untyped.
        list.data[kGrad][k] = const_cast<void*>(items[i].grad);
        list.data[kOutput][k] = items[i].output;
        list.dtype[kGrad][k] = items[i].grad_dtype;
        list.dtype[kOutput][k] = items[i].output_dtype;
        return items[i].count;
      });
  Verdict verdict{};
  verdict.found_inf = found_inf;
  verdict.first_overflow = first_overflow;
  verdict.inverse_scale = inverse_scale;
  verdict.arrivals = alloy::cuda::arrival_counter(ArrivalSlot::unscale);
  verdict.mark = alloy::cuda::arrival_counter(ArrivalSlot::unscale_mark);
  if (update != nullptr) {
    verdict.update = true;
    verdict.step = *update;
  }
  for (std::size_t l = 0; l < launches.size(); ++l) {
    verdict.finish = launches[l].last;
    ALLOY_LAUNCH(unscale_kernel, launches[l].blocks, alloy::cuda::kThreads, 0, stream)
    (launches[l].list, scale, verdict);
    ALLOY_CUDA_CHECK_LAUNCH("unscale_kernel on ", launches[l].list.size, " gradients (launch ",
                            l + 1, " of ", launches.size(), ")");
  }
}

}  // namespace alloy::amp::cuda
