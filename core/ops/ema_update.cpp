#include "core/ops/ema_update.h"

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/ema_update.h"
#endif

namespace alloy {

void ema_update(const std::vector<EmaTensors>& tensors, float decay, const Tensor& skip,
                const Tensor& updates) {
  constexpr const char* op = "ema_update";
  // Written so that NaN fails too.
  ALLOY_CHECK(decay >= 0.0f && decay < 1.0f, op, ": decay must be in [0, 1), got ", decay);
  if (skip.defined()) {
    check_dtype(op, "skip", skip, DType::f32);
    check_shape(op, "skip", skip, {1});
  }
  if (updates.defined()) {
    check_dtype(op, "updates", updates, DType::i32);
    ALLOY_CHECK(updates.numel() >= 1, op, ": updates needs an element, got ", updates.str());
  }
  std::vector<EmaBuffers> buffers;
  buffers.reserve(tensors.size());
  Device device = skip.defined() ? skip.device() : Device::cpu();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const EmaTensors& t = tensors[i];
    ALLOY_CHECK(
        t.average != nullptr && t.average->defined() && t.value != nullptr && t.value->defined(),
        op, ": pair ", i, " needs a defined average and value");
    const Device pair_device = common_device(op, {t.average, t.value});
    if (i == 0 && !skip.defined()) device = pair_device;
    ALLOY_CHECK(pair_device == device, op, ": pair ", i, " (", t.average->str(), ") is not on ",
                device.str(), ", the device of the ", skip.defined() ? "skip flag" : "first pair");
    ALLOY_CHECK(!updates.defined() || updates.device() == device, op, ": the update count (",
                updates.str(), ") is not on ", device.str());
    check_dtype(op, "average", *t.average, DType::f32);
    check_floating(op, "value", *t.value);
    check_shape(op, "value", *t.value, t.average->shape());
    const std::int64_t count = t.average->numel();
    // The kernels see only tensors with elements.
    if (count > 0)
      buffers.push_back({t.average->data<float>(), t.value->raw(), t.value->dtype(), count});
  }
  if (buffers.empty()) return;
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      // skip is read by the kernel itself: no host wait, and a graph replays its current value.
      cuda::ema_update(buffers, decay, skip.defined() ? skip.data<float>() : nullptr,
                       updates.defined() ? updates.data<std::int32_t>() : nullptr,
                       cuda::stream_of(device));
      return;
    });
  // On the CPU the flag is read where it lives; NaN counts as nonzero.
  if (skip.defined() && skip.data<float>()[0] != 0.0f) return;
  cpu::ema_update(
      buffers, updates.defined() ? warmed_up_decay(decay, updates.data<std::int32_t>()[0]) : decay);
}

}  // namespace alloy
