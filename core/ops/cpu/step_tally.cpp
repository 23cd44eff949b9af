#include "core/ops/step_tally.h"

#include "core/ops/softmax_cross_entropy.h"

namespace alloy::cpu {

void add_to_step_tally(StepTally* tally, const float* loss, const void* logits, DType dtype,
                       const std::int32_t* labels, std::int64_t rows, std::int64_t classes) {
  tally->loss_sum += static_cast<double>(*loss) * static_cast<double>(rows);
  tally->correct += static_cast<std::uint64_t>(count_correct(logits, dtype, labels, rows, classes));
}

}  // namespace alloy::cpu
