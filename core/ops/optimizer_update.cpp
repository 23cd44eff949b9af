#include "core/ops/optimizer_update.h"

#include <limits>
#include <utility>

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/optimizer_update.h"
#endif

namespace alloy {

namespace {

void check_state(const char* op, const char* what, const Tensor* state, const Tensor& param) {
  ALLOY_CHECK(state != nullptr && state->defined(), op, ": ", what, " of ", param.str(),
              " is an undefined tensor");
  check_dtype(op, what, *state, DType::f32);
  check_shape(op, what, *state, param.shape());
}

// The scalars' checks; returns the device the update runs on.
Device check_scalars(const char* op, const Tensor& lr, const Tensor& step, const Tensor& found_inf,
                     const Tensor& grad_factor, const Tensor& grad_unscale) {
  ALLOY_CHECK(lr.defined() && step.defined(), op, ": lr and step must be defined tensors");
  const Device device = common_device(op, {&lr, &step, &found_inf, &grad_factor, &grad_unscale});
  check_dtype(op, "lr", lr, DType::f32);
  check_shape(op, "lr", lr, {1});
  check_dtype(op, "step", step, DType::i32);
  check_shape(op, "step", step, {2});
  for (const auto& [what, scalar] : {std::pair<const char*, const Tensor*>{"found_inf", &found_inf},
                                     {"grad_factor", &grad_factor},
                                     {"grad_unscale", &grad_unscale}}) {
    if (!scalar->defined()) continue;
    check_dtype(op, what, *scalar, DType::f32);
    check_shape(op, what, *scalar, {1});
  }
  return device;
}

#ifdef ALLOY_HAVE_CUDA
// What the CUDA kernels read: the scalar's device address, or null for none.
const float* device_scalar(const Tensor& scalar) {
  return scalar.defined() ? scalar.data<float>() : nullptr;
}

cuda::GradFactors device_factors(const Tensor& grad_factor, const Tensor& grad_unscale) {
  return {device_scalar(grad_unscale), device_scalar(grad_factor)};
}
#endif

// On the CPU the factors are read where they live; multiplying by 1 changes no value.
cpu::GradFactors cpu_grad_factors(const Tensor& grad_factor, const Tensor& grad_unscale) {
  cpu::GradFactors factors;
  if (grad_unscale.defined()) factors.unscale = grad_unscale.data<float>()[0];
  if (grad_factor.defined()) factors.factor = grad_factor.data<float>()[0];
  return factors;
}

// The parameter's, gradient's and model copy's checks, and its buffers with no state yet.
UpdateBuffers buffers_of(const char* op, Device device, Tensor* param, const Tensor* grad,
                         Tensor* model_copy, std::uint32_t index) {
  ALLOY_CHECK(param != nullptr && param->defined() && grad != nullptr && grad->defined(), op,
              ": every parameter needs a defined value and gradient");
  ALLOY_CHECK(common_device(op, {param, grad}) == device, op, ": ", param->str(),
              " is not on the device of lr and step (", device.str(), ")");
  check_floating(op, "param", *param);
  check_floating(op, "grad", *grad);
  check_shape(op, "grad", *grad, param->shape());
  UpdateBuffers buffers{};
  buffers.param = param->raw();
  buffers.param_dtype = param->dtype();
  buffers.grad = grad->raw();
  buffers.grad_dtype = grad->dtype();
  buffers.count = param->numel();
  buffers.index = index;
  if (model_copy != nullptr) {
    ALLOY_CHECK(model_copy->defined() && model_copy->device() == device, op, ": the model copy of ",
                param->str(), " must be a tensor on ", device.str());
    // The copy of an fp32 parameter is its one rounding; a half parameter's would round twice.
    check_dtype(op, "param with a model copy", *param, DType::f32);
    check_floating(op, "model_copy", *model_copy);
    check_shape(op, "model_copy", *model_copy, param->shape());
    buffers.copy = model_copy->raw();
    buffers.copy_dtype = model_copy->dtype();
  }
  return buffers;
}

// On the CPU the flag is read where it lives; NaN counts as nonzero.
bool skip_step(const Tensor& found_inf) {
  return found_inf.defined() && found_inf.data<float>()[0] != 0.0f;
}

// The CPU's step count including this update.
std::int64_t next_step(const char* op, const Tensor& step) {
  const std::int32_t done = step.data<std::int32_t>()[0];
  ALLOY_CHECK(done >= 0 && done < std::numeric_limits<std::int32_t>::max(), op, ": step count ",
              done, " is out of range");
  return std::int64_t{done} + 1;
}

}  // namespace

void sgd_update(const std::vector<SgdTensors>& tensors, const SgdHyper& hyper, const Tensor& lr,
                Tensor& step, const Tensor& found_inf, const Tensor& grad_factor,
                const Tensor& grad_unscale) {
  constexpr const char* op = "sgd_update";
  const Device device = check_scalars(op, lr, step, found_inf, grad_factor, grad_unscale);
  ALLOY_CHECK(hyper.momentum >= 0.0f && hyper.weight_decay >= 0.0f, op,
              ": momentum and weight_decay must be non-negative, got ", hyper.momentum, ", ",
              hyper.weight_decay);
  ALLOY_CHECK(!hyper.nesterov || hyper.momentum > 0.0f, op, ": nesterov needs momentum > 0");
  std::vector<UpdateBuffers> buffers;
  buffers.reserve(tensors.size());
  for (const SgdTensors& t : tensors) {
    UpdateBuffers b = buffers_of(op, device, t.param, t.grad, t.model_copy, t.index);
    if (hyper.momentum != 0.0f) {
      check_state(op, "momentum_buffer", t.momentum_buffer, *t.param);
      ALLOY_CHECK(t.momentum_buffer->device() == device, op, ": ", t.momentum_buffer->str(),
                  " is not on ", device.str());
      b.state[0] = t.momentum_buffer->data<float>();
    }
    if (b.count > 0) buffers.push_back(b);  // the kernels see only tensors with elements
  }
  if (buffers.empty()) return;
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      // lr, step, found_inf and the factors are read by the kernel itself: no host sync.
      cuda::sgd_update(buffers, hyper, lr.data<float>(), step.data<std::int32_t>(),
                       device_scalar(found_inf), device_factors(grad_factor, grad_unscale),
                       cuda::stream_of(device));
      return;
    });
  if (skip_step(found_inf)) return;
  const std::int64_t next = next_step(op, step);
  cpu::sgd_update(buffers, hyper, lr.data<float>()[0], next,
                  cpu_grad_factors(grad_factor, grad_unscale));
  step.data<std::int32_t>()[0] = static_cast<std::int32_t>(next);
}

void adamw_update(const std::vector<AdamWTensors>& tensors, const AdamWHyper& hyper,
                  const Tensor& lr, Tensor& step, const Tensor& found_inf,
                  const Tensor& grad_factor, const Tensor& grad_unscale) {
  constexpr const char* op = "adamw_update";
  const Device device = check_scalars(op, lr, step, found_inf, grad_factor, grad_unscale);
  ALLOY_CHECK(hyper.eps >= 0.0f && hyper.weight_decay >= 0.0f, op,
              ": eps and weight_decay must be non-negative, got ", hyper.eps, ", ",
              hyper.weight_decay);
  ALLOY_CHECK(
      hyper.beta1 >= 0.0f && hyper.beta1 < 1.0f && hyper.beta2 >= 0.0f && hyper.beta2 < 1.0f, op,
      ": betas must be in [0, 1), got ", hyper.beta1, ", ", hyper.beta2);
  std::vector<UpdateBuffers> buffers;
  buffers.reserve(tensors.size());
  for (const AdamWTensors& t : tensors) {
    UpdateBuffers b = buffers_of(op, device, t.param, t.grad, t.model_copy, t.index);
    check_state(op, "exp_avg", t.exp_avg, *t.param);
    check_state(op, "exp_avg_sq", t.exp_avg_sq, *t.param);
    ALLOY_CHECK(t.exp_avg->device() == device && t.exp_avg_sq->device() == device, op,
                ": the AdamW state of ", t.param->str(), " is not on ", device.str());
    b.state[0] = t.exp_avg->data<float>();
    b.state[1] = t.exp_avg_sq->data<float>();
    if (b.count > 0) buffers.push_back(b);
  }
  if (buffers.empty()) return;
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::adamw_update(buffers, hyper, lr.data<float>(), step.data<std::int32_t>(),
                         device_scalar(found_inf), device_factors(grad_factor, grad_unscale),
                         cuda::stream_of(device));
      return;
    });
  if (skip_step(found_inf)) return;
  const std::int64_t next = next_step(op, step);
  cpu::adamw_update(buffers, hyper, lr.data<float>()[0], next,
                    cpu_grad_factors(grad_factor, grad_unscale));
  step.data<std::int32_t>()[0] = static_cast<std::int32_t>(next);
}

}  // namespace alloy
