#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/softmax_cross_entropy.h"
#include "core/ops/cuda/step_tally.h"

namespace alloy::cuda {

namespace {

// One thread: a single add, in the order the steps come. The _rn intrinsics keep nvcc from
// fusing the multiply and add, so the sum rounds like the CPU's.
__global__ void add_loss_kernel(double* loss_sum, const float* loss, double rows) {
  *loss_sum = __dadd_rn(*loss_sum, __dmul_rn(static_cast<double>(*loss), rows));
}

}  // namespace

void add_to_step_tally(double* loss_sum, unsigned long long* correct, const float* loss,
                       const void* logits, DType dtype, const std::int32_t* labels,
                       std::int64_t rows, std::int64_t classes, cudaStream_t stream) {
  add_loss_kernel<<<1, 1, 0, stream>>>(loss_sum, loss, static_cast<double>(rows));
  ALLOY_CUDA_CHECK_LAUNCH("add_loss_kernel for a batch of ", rows);
  count_correct(logits, dtype, labels, correct, rows, classes, stream);
}

}  // namespace alloy::cuda
