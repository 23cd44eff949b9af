#include "core/ops/clip_grad_norm.h"

#include <cmath>

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/clip_grad_norm.h"
#endif

namespace alloy {

namespace {

void check_tally(const char* op, const Tensor& tally) {
  check_dtype(op, "tally", tally, DType::i32);
  check_shape(op, "tally", tally, {4});
}

}  // namespace

Tensor make_clip_tally(Device device, const ClipTally& value) {
  return Tensor::from_bytes({4}, DType::i32, &value, device, MemoryCategory::workspace);
}

ClipTally read_clip_tally(const Tensor& tally) {
  check_tally("read_clip_tally", tally);
  ClipTally value;
  tally.download_to(&value);
  return value;
}

void clip_grad_norm(const std::vector<const Tensor*>& grads, float max_norm, Tensor& norm,
                    Tensor& coefficient, Tensor& tally, const Tensor& unscale) {
  constexpr const char* op = "clip_grad_norm";
  ALLOY_CHECK(max_norm > 0.0f && std::isfinite(max_norm), op,
              ": max_norm must be positive and finite, got ", max_norm);
  const Device device = common_device(op, {&norm, &coefficient, &tally, &unscale});
  check_dtype(op, "norm", norm, DType::f32);
  check_shape(op, "norm", norm, {1});
  check_dtype(op, "coefficient", coefficient, DType::f32);
  check_shape(op, "coefficient", coefficient, {1});
  if (tally.defined()) check_tally(op, tally);
  if (unscale.defined()) {
    check_dtype(op, "unscale", unscale, DType::f32);
    check_shape(op, "unscale", unscale, {1});
  }
  std::vector<NormItem> items;
  items.reserve(grads.size());
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const Tensor* grad = grads[i];
    ALLOY_CHECK(grad != nullptr && grad->defined(), op, ": gradient ", i,
                " is an undefined tensor");
    check_floating(op, "gradient", *grad);
    ALLOY_CHECK(grad->device() == device, op, ": gradient ", i, " (", grad->str(),
                ") is not on the device of the norm (", device.str(), ")");
    if (grad->numel() > 0) items.push_back({grad->raw(), grad->dtype(), grad->numel()});
  }
  auto* running = tally.defined() ? static_cast<ClipTally*>(tally.raw()) : nullptr;
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      // The norm, the coefficient and the tally are written by the kernel: no host sync.
      cuda::clip_grad_norm(items, max_norm, norm.data<float>(), coefficient.data<float>(), running,
                           unscale.defined() ? unscale.data<float>() : nullptr,
                           cuda::stream_of(device));
      return;
    });
  cpu::clip_grad_norm(items, max_norm, norm.data<float>(), coefficient.data<float>(), running,
                      unscale.defined() ? unscale.data<float>()[0] : 1.0f);
}

}  // namespace alloy
