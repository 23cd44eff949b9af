#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/last_block.h"
#include "core/ops/cuda/softmax_cross_entropy.h"

namespace alloy::cuda {

namespace {

// The row's largest logit, reduced over the block.
template <class T>
__device__ float row_max(const T* x, std::int64_t classes) {
  float local_max = -INFINITY;
  for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    local_max = fmaxf(local_max, widen(x[c]));
  }
  return block_max(local_max);
}

// The row's loss: -log softmax at the label, or with label smoothing its smoothed form
// (core/ops/softmax_cross_entropy.h), without forming the (possibly underflowed)
// probabilities; NaN for a label outside the row. total is the sum of expf(x - max) over the
// row. Every thread of the block calls it (the smoothing sums over the block); thread 0 has
// the result.
template <class T>
__device__ float row_loss_at(const T* x, std::int32_t label, std::int64_t classes, float max,
                             float total, float label_smoothing) {
  const float log_total = logf(total);
  const float at_label = label >= 0 && label < classes ? log_total + (max - widen(x[label])) : NAN;
  if (label_smoothing == 0.0f) return at_label;
  float local = 0.0f;
  for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x)
    local += log_total + (max - widen(x[c]));
  const float over_row = block_sum(local);
  const LabelSmoothingTerms terms = label_smoothing_terms(label_smoothing, classes);
  // The CPU's fma, spelled out: __fmul_rn is never contracted.
  return __fmaf_rn(terms.off, over_row, __fmul_rn(terms.keep, at_label));
}

// The class of the row's first largest logit, a NaN counting as the largest: one thread's loop.
template <class T>
__device__ std::int64_t row_argmax(const T* x, std::int64_t classes) {
  std::int64_t best = 0;
  float best_value = widen(x[0]);
  for (std::int64_t c = 1; c < classes; ++c) {
    const float value = widen(x[c]);
    if (value > best_value || (value != value && best_value == best_value)) {
      best = c;
      best_value = value;
    }
  }
  return best;
}

// One block per row: max, exp and sum in fp32 with block reductions. The block that finishes
// last also forms the mean loss, so the loss costs one launch.
template <class T>
__global__ void forward_kernel(const T* logits, const std::int32_t* labels, float* probabilities,
                               float* row_loss, float* loss, std::int64_t rows,
                               std::int64_t classes, float label_smoothing,
                               unsigned int* arrivals) {
  const std::int64_t row = blockIdx.x;
  const T* x = logits + row * classes;
  float* p = probabilities + row * classes;
  const float max = row_max(x, classes);
  float local_sum = 0.0f;
  for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    const float e = expf(widen(x[c]) - max);
    p[c] = e;
    local_sum += e;
  }
  __shared__ float total;
  const float sum = block_sum(local_sum);
  if (threadIdx.x == 0) total = sum;
  __syncthreads();
  for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x)
    p[c] /= total;
  const float loss_of_row = row_loss_at(x, labels[row], classes, max, total, label_smoothing);
  if (threadIdx.x == 0) row_loss[row] = loss_of_row;
  if (!arrive_last(arrivals)) return;
  // The mean in double over a fixed tree (each thread's rows in order, then the block sum):
  // deterministic for a shape, and equal to the CPU's row-order double sum whenever that sum is
  // exact, which it is unless the row losses span more than about 2^29 in magnitude.
  double partial = 0.0;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    partial += __ldcg(row_loss + r);
  const double loss_sum = block_sum(partial);
  if (threadIdx.x == 0) *loss = static_cast<float>(loss_sum / static_cast<double>(rows));
}

// factor * (p - q); without smoothing, p - 0 and p - 1: the unsmoothed gradient's bits.
__device__ __forceinline__ float gradient_at(float p, bool at_label,
                                             const LabelSmoothingTerms& terms, float factor) {
  return (p - (at_label ? terms.on : terms.off)) * factor;
}

template <class T>
__global__ void backward_kernel(const float* probabilities, const std::int32_t* labels,
                                float grad_scale, const float* grad_scale_device, T* dlogits,
                                std::int64_t rows, std::int64_t classes, float label_smoothing) {
  const float scale = grad_scale_device ? grad_scale * *grad_scale_device : grad_scale;
  const float factor = scale / static_cast<float>(rows);
  const LabelSmoothingTerms terms = label_smoothing_terms(label_smoothing, classes);
  ALLOY_GRID_STRIDE(i, rows * classes) {
    const std::int64_t row = i / classes;
    const bool at_label = labels[row] == i % classes;
    dlogits[i] = narrow<T>(gradient_at(probabilities[i], at_label, terms, factor));
  }
}

// One thread per row; first maximum wins ties, a NaN counts as the largest. With a loss_sum,
// the first thread also adds the batch's loss to it (the step tally's other half, one launch
// for both). The _rn intrinsics keep nvcc from fusing the multiply and add, so the sum rounds
// like the CPU's.
template <class T>
__global__ void count_kernel(const T* logits, const std::int32_t* labels,
                             unsigned long long* correct, std::int64_t rows, std::int64_t classes,
                             const float* loss, double* loss_sum) {
  if (loss_sum != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
    *loss_sum =
        __dadd_rn(*loss_sum, __dmul_rn(static_cast<double>(*loss), static_cast<double>(rows)));
  }
  ALLOY_GRID_STRIDE(row, rows) {
    const T* x = logits + row * classes;
    const std::int64_t best = row_argmax(x, classes);
    if (best == labels[row]) atomicAdd(correct, 1ull);  // integer: order-independent
  }
}

// forward_kernel, backward_kernel and count_kernel's work on a row in one block, the same
// arithmetic in the same order (so the same bits): the probabilities are recomputed from the
// same expf where the backward pass would have read them back, and the row's winner is found
// by one thread, as count_kernel's thread per row does. The last block to finish forms the
// mean as forward_kernel does and adds it and the correct count to the step tally.
template <class T>
__global__ void step_kernel(const T* logits, const std::int32_t* labels, const float* loss_scale,
                            T* dlogits, float* row_loss, std::uint32_t* row_correct, float* loss,
                            double* loss_sum, unsigned long long* correct, std::int64_t rows,
                            std::int64_t classes, std::int64_t gradient_rows, float label_smoothing,
                            unsigned int* arrivals) {
  const std::int64_t row = blockIdx.x;
  const T* x = logits + row * classes;
  T* dx = dlogits + row * classes;
  const float max = row_max(x, classes);
  float local_sum = 0.0f;
  for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x)
    local_sum += expf(widen(x[c]) - max);
  __shared__ float total;
  const float sum = block_sum(local_sum);
  if (threadIdx.x == 0) total = sum;
  __syncthreads();
  const std::int32_t label = labels[row];
  const float factor = *loss_scale / static_cast<float>(gradient_rows);
  const LabelSmoothingTerms terms = label_smoothing_terms(label_smoothing, classes);
  for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    const float p = expf(widen(x[c]) - max) / total;
    dx[c] = narrow<T>(gradient_at(p, c == label, terms, factor));
  }
  const float loss_of_row = row_loss_at(x, label, classes, max, total, label_smoothing);
  if (threadIdx.x == 0) {
    row_loss[row] = loss_of_row;
    const std::int64_t best = row_argmax(x, classes);
    row_correct[row] = best == label;
  }
  if (!arrive_last(arrivals)) return;
  // forward_kernel's fixed tree for the loss; the count is summed in double too, exactly.
  double partial_loss = 0.0;
  double partial_correct = 0.0;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    partial_loss += __ldcg(row_loss + r);
    partial_correct += __ldcg(row_correct + r);
  }
  const double loss_total = block_sum(partial_loss);
  const double correct_total = block_sum(partial_correct);
  if (threadIdx.x == 0) {
    const float mean = static_cast<float>(loss_total / static_cast<double>(rows));
    *loss = mean;
    // count_kernel's rounding: no fused multiply-add.
    *loss_sum =
        __dadd_rn(*loss_sum, __dmul_rn(static_cast<double>(mean), static_cast<double>(rows)));
    *correct += static_cast<unsigned long long>(correct_total);
  }
}

unsigned int threads_for(std::int64_t classes) {
  // One warp for small class counts (Fashion-MNIST's 10), up to 256 threads for wide rows.
  std::int64_t threads = 32;
  while (threads < classes && threads < 256)
    threads *= 2;
  return static_cast<unsigned int>(threads);
}

}  // namespace

void softmax_cross_entropy_forward(const void* logits, DType dtype, const std::int32_t* labels,
                                   float* probabilities, float* row_loss, float* loss,
                                   std::int64_t rows, std::int64_t classes, float label_smoothing,
                                   cudaStream_t stream) {
  ALLOY_CHECK(rows > 0 && rows <= 0x7fffffff, "softmax_cross_entropy_forward: ", rows,
              " rows do not fit one grid");
  unsigned int* arrivals = arrival_counter(ArrivalSlot::softmax_loss);
  dispatch_floating(dtype, "softmax_cross_entropy_forward", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(forward_kernel, static_cast<unsigned int>(rows), threads_for(classes), 0, stream)
    (static_cast<const T*>(logits), labels, probabilities, row_loss, loss, rows, classes,
     label_smoothing, arrivals);
  });
  ALLOY_CUDA_CHECK_LAUNCH("softmax forward_kernel on ", rows, "x", classes, " logits");
}

void softmax_cross_entropy_backward(const float* probabilities, const std::int32_t* labels,
                                    float grad_scale, const float* grad_scale_device, void* dlogits,
                                    DType dtype, std::int64_t rows, std::int64_t classes,
                                    float label_smoothing, cudaStream_t stream) {
  const std::int64_t count = rows * classes;
  if (count == 0) return;
  dispatch_floating(dtype, "softmax_cross_entropy_backward", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(backward_kernel, grid_for(count), kThreads, 0, stream)
    (probabilities, labels, grad_scale, grad_scale_device, static_cast<T*>(dlogits), rows, classes,
     label_smoothing);
  });
  ALLOY_CUDA_CHECK_LAUNCH("softmax backward_kernel on ", rows, "x", classes, " gradients");
}

void softmax_cross_entropy_step(const void* logits, DType dtype, const std::int32_t* labels,
                                const float* loss_scale, void* dlogits, float* row_loss,
                                std::uint32_t* row_correct, float* loss, double* loss_sum,
                                unsigned long long* correct, std::int64_t rows,
                                std::int64_t classes, std::int64_t gradient_rows,
                                float label_smoothing, cudaStream_t stream) {
  ALLOY_CHECK(rows > 0 && rows <= 0x7fffffff, "softmax_cross_entropy_step: ", rows,
              " rows do not fit one grid");
  // The loss's counter: this kernel and forward_kernel never overlap (one stream).
  unsigned int* arrivals = arrival_counter(ArrivalSlot::softmax_loss);
  dispatch_floating(dtype, "softmax_cross_entropy_step", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(step_kernel, static_cast<unsigned int>(rows), threads_for(classes), 0, stream)
    (static_cast<const T*>(logits), labels, loss_scale, static_cast<T*>(dlogits), row_loss,
     row_correct, loss, loss_sum, correct, rows, classes, gradient_rows, label_smoothing, arrivals);
  });
  ALLOY_CUDA_CHECK_LAUNCH("softmax step_kernel on ", rows, "x", classes, " logits");
}

void count_correct(const void* logits, DType dtype, const std::int32_t* labels,
                   unsigned long long* correct, std::int64_t rows, std::int64_t classes,
                   cudaStream_t stream, const float* loss, double* loss_sum) {
  if (rows == 0 && loss_sum == nullptr) return;
  dispatch_floating(dtype, "count_correct", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(count_kernel, grid_for(rows), kThreads, 0, stream)
    (static_cast<const T*>(logits), labels, correct, rows, classes, loss, loss_sum);
  });
  ALLOY_CUDA_CHECK_LAUNCH("count_kernel on ", rows, " rows");
}

}  // namespace alloy::cuda
