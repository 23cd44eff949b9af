#include "core/ops/softmax_cross_entropy.h"

#include <cmath>
#include <vector>

#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/parallel.h"

namespace alloy::cpu {

namespace {

// Calls body(row, scratch) for every row, rows split over the pool; scratch holds one row.
template <class Body>
void for_rows(std::int64_t rows, std::int64_t classes, const Body& body) {
  parallel_ranges(rows, classes, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> scratch(static_cast<std::size_t>(classes));
    for (std::int64_t row = begin; row < end; ++row)
      body(row, scratch.data());
  });
}

// The label's row winner as count_correct decides it: first maximum wins ties, a NaN counts as
// the largest.
std::int64_t arg_max(const float* x, std::int64_t classes) {
  std::int64_t best = 0;
  for (std::int64_t c = 1; c < classes; ++c) {
    if (x[c] > x[best] || (x[c] != x[c] && x[best] == x[best])) best = c;
  }
  return best;
}

// The softmax of one row of widened logits into p; returns the row's loss, -log p[label] or its
// smoothed form (softmax_cross_entropy.h), formed without the (possibly underflowed)
// probabilities.
float softmax_row(const float* x, float* p, std::int64_t classes, std::int32_t label,
                  float label_smoothing) {
  float max = x[0];
  for (std::int64_t c = 1; c < classes; ++c)
    max = std::fmax(max, x[c]);
  float sum = 0.0f;
  for (std::int64_t c = 0; c < classes; ++c) {
    p[c] = std::exp(x[c] - max);
    sum += p[c];
  }
  for (std::int64_t c = 0; c < classes; ++c)
    p[c] /= sum;
  const float log_sum = std::log(sum);
  const float at_label = log_sum + (max - x[label]);
  if (label_smoothing == 0.0f) return at_label;
  float over_row = 0.0f;
  for (std::int64_t c = 0; c < classes; ++c)
    over_row += log_sum + (max - x[c]);
  const LabelSmoothingTerms terms = label_smoothing_terms(label_smoothing, classes);
  // Spelled out, as the CUDA kernel does: no contraction may fuse the product into the sum.
  return std::fma(terms.off, over_row, terms.keep * at_label);
}

// One row's gradient, grad_scale / rows (factor) times p - q, before its rounding to the
// logits' dtype.
void gradient_row(const float* p, std::int32_t label, const LabelSmoothingTerms& terms,
                  float factor, float* out, std::int64_t classes) {
  for (std::int64_t c = 0; c < classes; ++c)
    out[c] = (p[c] - terms.off) * factor;
  out[label] = (p[label] - terms.on) * factor;
}

}  // namespace

float softmax_cross_entropy_forward(const void* logits, DType dtype, const std::int32_t* labels,
                                    float* probabilities, std::int64_t rows, std::int64_t classes,
                                    float label_smoothing) {
  std::vector<double> row_loss(static_cast<std::size_t>(rows));
  for_rows(rows, classes, [&](std::int64_t row, float* scratch) {
    const float* x = load_floats(logits, dtype, row * classes, classes, scratch);
    row_loss[static_cast<std::size_t>(row)] =
        softmax_row(x, probabilities + row * classes, classes, labels[row], label_smoothing);
  });
  double total = 0.0;
  for (const double loss : row_loss)
    total += loss;
  return static_cast<float>(total / static_cast<double>(rows));
}

void softmax_cross_entropy_backward(const float* probabilities, const std::int32_t* labels,
                                    float grad_scale, void* dlogits, DType dtype, std::int64_t rows,
                                    std::int64_t classes, float label_smoothing) {
  const float factor = grad_scale / static_cast<float>(rows);
  const LabelSmoothingTerms terms = label_smoothing_terms(label_smoothing, classes);
  for_rows(rows, classes, [&](std::int64_t row, float* scratch) {
    float* out = output_floats(dlogits, dtype, row * classes, scratch);
    gradient_row(probabilities + row * classes, labels[row], terms, factor, out, classes);
    store_floats(out, dlogits, dtype, row * classes, classes);
  });
}

std::int64_t count_correct(const void* logits, DType dtype, const std::int32_t* labels,
                           std::int64_t rows, std::int64_t classes) {
  std::vector<float> scratch(static_cast<std::size_t>(classes));
  std::int64_t correct = 0;
  for (std::int64_t row = 0; row < rows; ++row) {
    const float* x = load_floats(logits, dtype, row * classes, classes, scratch.data());
    correct += arg_max(x, classes) == labels[row];
  }
  return correct;
}

float softmax_cross_entropy_step(const void* logits, DType dtype, const std::int32_t* labels,
                                 float grad_scale, void* dlogits, StepTally* tally,
                                 std::int64_t rows, std::int64_t classes,
                                 std::int64_t gradient_rows, float label_smoothing) {
  // The arithmetic of the forward, backward and tally functions above, in their order, one
  // row at a time: the same bits (with gradient_rows == rows), in one pass over the logits.
  std::vector<double> row_loss(static_cast<std::size_t>(rows));
  std::vector<unsigned char> row_correct(static_cast<std::size_t>(rows));
  const float factor = grad_scale / static_cast<float>(gradient_rows);
  const LabelSmoothingTerms terms = label_smoothing_terms(label_smoothing, classes);
  parallel_ranges(rows, classes, [&](std::int64_t begin, std::int64_t end) {
    // One row's widened logits, probabilities and (for half gradients) unrounded gradients.
    std::vector<float> scratch(static_cast<std::size_t>(3 * classes));
    float* p = scratch.data() + classes;
    for (std::int64_t row = begin; row < end; ++row) {
      const float* x = load_floats(logits, dtype, row * classes, classes, scratch.data());
      const std::int32_t label = labels[row];
      row_loss[static_cast<std::size_t>(row)] = softmax_row(x, p, classes, label, label_smoothing);
      row_correct[static_cast<std::size_t>(row)] = arg_max(x, classes) == label;
      float* out = output_floats(dlogits, dtype, row * classes, p + classes);
      gradient_row(p, label, terms, factor, out, classes);
      store_floats(out, dlogits, dtype, row * classes, classes);
    }
  });
  double total = 0.0;
  for (const double loss : row_loss)
    total += loss;
  const float loss = static_cast<float>(total / static_cast<double>(rows));
  std::uint64_t correct = 0;
  for (const unsigned char hit : row_correct)
    correct += hit;
  tally->loss_sum += static_cast<double>(loss) * static_cast<double>(rows);
  tally->correct += correct;
  return loss;
}

}  // namespace alloy::cpu
