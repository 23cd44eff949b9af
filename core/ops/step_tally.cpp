#include "core/ops/step_tally.h"

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/step_tally.h"
#endif

namespace alloy {

namespace {

void check_tally(const char* op, const Tensor& tally) {
  check_dtype(op, "tally", tally, DType::i32);
  check_shape(op, "tally", tally, {4});
}

}  // namespace

Tensor make_step_tally(Device device, const StepTally& value) {
  return Tensor::from_bytes({4}, DType::i32, &value, device, MemoryCategory::workspace);
}

void add_to_step_tally(Tensor& tally, const Tensor& loss, const Tensor& logits,
                       const Tensor& labels) {
  constexpr const char* op = "add_to_step_tally";
  const Device device = common_device(op, {&tally, &loss, &logits, &labels});
  check_tally(op, tally);
  check_dtype(op, "loss", loss, DType::f32);
  check_shape(op, "loss", loss, {1});
  check_floating(op, "logits", logits);
  check_rank(op, "logits", logits, 2);
  check_dtype(op, "labels", labels, DType::i32);
  check_shape(op, "labels", labels, {logits.dim(0)});
  auto* value = static_cast<StepTally*>(tally.raw());
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::add_to_step_tally(
          &value->loss_sum, reinterpret_cast<unsigned long long*>(&value->correct),
          loss.data<float>(), logits.raw(), logits.dtype(), labels.data<std::int32_t>(),
          logits.dim(0), logits.dim(1), cuda::stream_of(device));
      return;
    });
  cpu::add_to_step_tally(value, loss.data<float>(), logits.raw(), logits.dtype(),
                         labels.data<std::int32_t>(), logits.dim(0), logits.dim(1));
}

StepTally read_step_tally(const Tensor& tally) {
  check_tally("read_step_tally", tally);
  StepTally value;
  static_assert(sizeof value == 4 * sizeof(std::int32_t), "the tally is four i32 elements");
  tally.download_to(&value);
  return value;
}

}  // namespace alloy
