#include "core/ops/softmax_cross_entropy.h"

#include "core/ops/dispatch.h"
#include "core/round_trips.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/softmax_cross_entropy.h"
#endif

namespace alloy {

namespace {

// Shapes, dtypes and label range shared by the three entry points; returns the class count.
std::int64_t check_inputs(const char* op, const char* what, const Tensor& scores,
                          const Tensor& labels) {
  check_rank(op, what, scores, 2);
  check_dtype(op, "labels", labels, DType::i32);
  check_shape(op, "labels", labels, {scores.dim(0)});
  ALLOY_CHECK(scores.dim(1) > 0, op, ": ", what, " must have at least one class, got ",
              scores.str());
  return scores.dim(1);
}

// Out-of-range labels would index outside a row; checked on the host, where labels live.
void check_labels(const char* op, const Tensor& labels, std::int64_t classes) {
  const std::int32_t* values = labels.data<std::int32_t>();
  for (std::int64_t row = 0; row < labels.numel(); ++row) {
    ALLOY_CHECK(values[row] >= 0 && values[row] < classes, op, ": label ", values[row], " of row ",
                row, " is outside [0, ", classes, ")");
  }
}

// PyTorch's range less its end: eps 1 would make the target uniform, the label unlearnable.
// A NaN fails the comparisons too.
void check_label_smoothing(const char* op, float label_smoothing) {
  ALLOY_CHECK(label_smoothing >= 0.0f && label_smoothing < 1.0f, op,
              ": label_smoothing must be in [0, 1), got ", label_smoothing);
}

}  // namespace

SoftmaxCrossEntropyResult softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels,
                                                        float label_smoothing) {
  constexpr const char* op = "softmax_cross_entropy_forward";
  const Device device = common_device(op, {&logits, &labels});
  check_label_smoothing(op, label_smoothing);
  check_floating(op, "logits", logits);
  const std::int64_t classes = check_inputs(op, "logits", logits, labels);
  ALLOY_CHECK(logits.dim(0) > 0, op, ": the mean over an empty batch is undefined");
  SoftmaxCrossEntropyResult result;
  result.loss = Tensor::empty({1}, DType::f32, device, MemoryCategory::activations);
  result.probabilities =
      Tensor::empty(logits.shape(), DType::f32, device, MemoryCategory::activations);
  // Device labels are not range-checked (that would cost a host sync); a bad one makes its
  // row's loss NaN.
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      Tensor row_loss =
          Tensor::empty({logits.dim(0)}, DType::f32, device, MemoryCategory::workspace);
      cuda::softmax_cross_entropy_forward(
          logits.raw(), logits.dtype(), labels.data<std::int32_t>(),
          result.probabilities.data<float>(), row_loss.data<float>(), result.loss.data<float>(),
          logits.dim(0), classes, label_smoothing, cuda::stream_of(device));
      return result;
    });
  check_labels(op, labels, classes);
  result.loss.data<float>()[0] = cpu::softmax_cross_entropy_forward(
      logits.raw(), logits.dtype(), labels.data<std::int32_t>(), result.probabilities.data<float>(),
      logits.dim(0), classes, label_smoothing);
  return result;
}

Tensor softmax_cross_entropy_backward(const Tensor& probabilities, const Tensor& labels,
                                      float grad_scale, DType dtype, float label_smoothing) {
  constexpr const char* op = "softmax_cross_entropy_backward";
  const Device device = common_device(op, {&probabilities, &labels});
  check_label_smoothing(op, label_smoothing);
  check_dtype(op, "probabilities", probabilities, DType::f32);
  const std::int64_t classes = check_inputs(op, "probabilities", probabilities, labels);
  ALLOY_CHECK(is_floating(dtype), op, ": gradient dtype must be f32, f16 or bf16, got ",
              dtype_name(dtype));
  Tensor dlogits = Tensor::empty(probabilities.shape(), dtype, device, MemoryCategory::activations);
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::softmax_cross_entropy_backward(probabilities.data<float>(), labels.data<std::int32_t>(),
                                           grad_scale, nullptr, dlogits.raw(), dtype,
                                           probabilities.dim(0), classes, label_smoothing,
                                           cuda::stream_of(device));
      return dlogits;
    });
  check_labels(op, labels, classes);
  cpu::softmax_cross_entropy_backward(probabilities.data<float>(), labels.data<std::int32_t>(),
                                      grad_scale, dlogits.raw(), dtype, probabilities.dim(0),
                                      classes, label_smoothing);
  return dlogits;
}

Tensor softmax_cross_entropy_backward(const Tensor& probabilities, const Tensor& labels,
                                      const Tensor& loss_scale, DType dtype,
                                      float label_smoothing) {
  constexpr const char* op = "softmax_cross_entropy_backward";
  common_device(op, {&probabilities, &labels, &loss_scale});
  check_label_smoothing(op, label_smoothing);
  check_dtype(op, "loss_scale", loss_scale, DType::f32);
  check_shape(op, "loss_scale", loss_scale, {1});
  if (loss_scale.device().is_cuda())
    ALLOY_CUDA_PATH(op, loss_scale.device(), {
      // The scale stays on the device: the kernel reads it, the host never waits for it.
      const Device device = loss_scale.device();
      check_dtype(op, "probabilities", probabilities, DType::f32);
      const std::int64_t classes = check_inputs(op, "probabilities", probabilities, labels);
      ALLOY_CHECK(is_floating(dtype), op, ": gradient dtype must be f32, f16 or bf16, got ",
                  dtype_name(dtype));
      Tensor dlogits =
          Tensor::empty(probabilities.shape(), dtype, device, MemoryCategory::activations);
      cuda::softmax_cross_entropy_backward(probabilities.data<float>(), labels.data<std::int32_t>(),
                                           1.0f, loss_scale.data<float>(), dlogits.raw(), dtype,
                                           probabilities.dim(0), classes, label_smoothing,
                                           cuda::stream_of(device));
      return dlogits;
    });
  return softmax_cross_entropy_backward(probabilities, labels, loss_scale.data<float>()[0], dtype,
                                        label_smoothing);
}

SoftmaxCrossEntropyStep softmax_cross_entropy_step(const Tensor& logits, const Tensor& labels,
                                                   const Tensor& loss_scale, Tensor& tally,
                                                   std::int64_t gradient_rows,
                                                   float label_smoothing) {
  constexpr const char* op = "softmax_cross_entropy_step";
  const Device device = common_device(op, {&logits, &labels, &loss_scale, &tally});
  check_label_smoothing(op, label_smoothing);
  check_floating(op, "logits", logits);
  const std::int64_t classes = check_inputs(op, "logits", logits, labels);
  ALLOY_CHECK(logits.dim(0) > 0, op, ": the mean over an empty batch is undefined");
  check_dtype(op, "loss_scale", loss_scale, DType::f32);
  check_shape(op, "loss_scale", loss_scale, {1});
  check_dtype(op, "tally", tally, DType::i32);
  check_shape(op, "tally", tally, {4});
  const std::int64_t rows = logits.dim(0);
  if (gradient_rows == 0) gradient_rows = rows;
  ALLOY_CHECK(gradient_rows >= rows, op, ": gradient_rows ", gradient_rows,
              " is fewer than the logits' ", rows,
              " rows (the mean is over a step that holds them)");
  SoftmaxCrossEntropyStep result;
  result.loss = Tensor::empty({1}, DType::f32, device, MemoryCategory::activations);
  result.dlogits =
      Tensor::empty(logits.shape(), logits.dtype(), device, MemoryCategory::activations);
  auto* sums = static_cast<StepTally*>(tally.raw());
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      // Device labels are not range-checked (a host sync); a bad one makes its row's loss NaN.
      Tensor row_loss = Tensor::empty({rows}, DType::f32, device, MemoryCategory::workspace);
      Tensor row_correct = Tensor::empty({rows}, DType::i32, device, MemoryCategory::workspace);
      cuda::softmax_cross_entropy_step(
          logits.raw(), logits.dtype(), labels.data<std::int32_t>(), loss_scale.data<float>(),
          result.dlogits.raw(), row_loss.data<float>(),
          reinterpret_cast<std::uint32_t*>(row_correct.raw()), result.loss.data<float>(),
          &sums->loss_sum, reinterpret_cast<unsigned long long*>(&sums->correct), rows, classes,
          gradient_rows, label_smoothing, cuda::stream_of(device));
      return result;
    });
  check_labels(op, labels, classes);
  result.loss.data<float>()[0] = cpu::softmax_cross_entropy_step(
      logits.raw(), logits.dtype(), labels.data<std::int32_t>(), loss_scale.data<float>()[0],
      result.dlogits.raw(), sums, rows, classes, gradient_rows, label_smoothing);
  return result;
}

std::int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  constexpr const char* op = "count_correct";
  const Device device = common_device(op, {&logits, &labels});
  check_floating(op, "logits", logits);
  const std::int64_t classes = check_inputs(op, "logits", logits, labels);
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      // The one op that returns a host value: it waits for the device (logging only).
      Tensor counter = Tensor::zeros({2}, DType::i32, device, MemoryCategory::workspace);
      cuda::count_correct(logits.raw(), logits.dtype(), labels.data<std::int32_t>(),
                          static_cast<unsigned long long*>(counter.raw()), logits.dim(0), classes,
                          cuda::stream_of(device));
      std::uint64_t correct = 0;
      counter.download_to(&correct);
      return static_cast<std::int64_t>(correct);
    });
  // The host computes the count from device memory: this backend's download (on a GPU, the
  // download above).
  count_download();
  count_host_wait();
  return cpu::count_correct(logits.raw(), logits.dtype(), labels.data<std::int32_t>(),
                            logits.dim(0), classes);
}

}  // namespace alloy
