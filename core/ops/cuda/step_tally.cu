#include "core/ops/cuda/softmax_cross_entropy.h"
#include "core/ops/cuda/step_tally.h"

namespace alloy::cuda {

void add_to_step_tally(double* loss_sum, unsigned long long* correct, const float* loss,
                       const void* logits, DType dtype, const std::int32_t* labels,
                       std::int64_t rows, std::int64_t classes, cudaStream_t stream) {
  // One launch: the count's kernel adds the loss too.
  count_correct(logits, dtype, labels, correct, rows, classes, stream, loss, loss_sum);
}

}  // namespace alloy::cuda
