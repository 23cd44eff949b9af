#include "core/ops/optimizer_update.h"

#include "core/ops/cpu/float_buffer.h"
#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/optimizer_update.h"
#endif

namespace alloy {

namespace {

void check_param_and_grad(const char* op, const Tensor& param, const Tensor& grad) {
  check_floating(op, "param", param);
  check_floating(op, "grad", grad);
  check_shape(op, "grad", grad, param.shape());
}

void check_state(const char* op, const char* what, const Tensor& state, const Tensor& param) {
  ALLOY_CHECK(state.defined(), op, ": ", what, " is an undefined tensor");
  check_dtype(op, what, state, DType::f32);
  check_shape(op, what, state, param.shape());
}

void check_found_inf(const char* op, const Tensor& found_inf) {
  if (!found_inf.defined()) return;
  check_dtype(op, "found_inf", found_inf, DType::f32);
  check_shape(op, "found_inf", found_inf, {1});
}

// On the CPU the flag is read where it lives; NaN counts as nonzero.
bool skip_step(const Tensor& found_inf) {
  return found_inf.defined() && found_inf.data<float>()[0] != 0.0f;
}

}  // namespace

void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdHyper& hyper,
                bool first_step, const Tensor& found_inf) {
  constexpr const char* op = "sgd_update";
  const Device device = common_device(op, {&param, &grad, &momentum_buffer, &found_inf});
  check_param_and_grad(op, param, grad);
  check_found_inf(op, found_inf);
  ALLOY_CHECK(hyper.lr >= 0.0f && hyper.momentum >= 0.0f && hyper.weight_decay >= 0.0f, op,
              ": lr, momentum and weight_decay must be non-negative, got ", hyper.lr, ", ",
              hyper.momentum, ", ", hyper.weight_decay);
  ALLOY_CHECK(!hyper.nesterov || (hyper.momentum > 0.0f && hyper.dampening == 0.0f), op,
              ": nesterov needs momentum > 0 and zero dampening");
  if (hyper.momentum != 0.0f) check_state(op, "momentum_buffer", momentum_buffer, param);
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      // found_inf is read by the kernel itself: no host sync.
      cuda::sgd_update(param.raw(), param.dtype(), grad.raw(), grad.dtype(),
                       hyper.momentum != 0.0f ? momentum_buffer.data<float>() : nullptr,
                       param.numel(), hyper, first_step,
                       found_inf.defined() ? found_inf.data<float>() : nullptr,
                       cuda::stream_of(device));
      return;
    });
  if (skip_step(found_inf)) return;
  // A half parameter (O3, or O2 without masters) is updated in fp32 and rounded once.
  cpu::FloatOutput param_float(param, /*accumulate=*/true);
  cpu::sgd_update(param_float.data(), grad.raw(), grad.dtype(),
                  hyper.momentum != 0.0f ? momentum_buffer.data<float>() : nullptr, param.numel(),
                  hyper, first_step);
  param_float.commit();
}

void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                  const AdamWHyper& hyper, std::int64_t step, const Tensor& found_inf) {
  constexpr const char* op = "adamw_update";
  const Device device = common_device(op, {&param, &grad, &exp_avg, &exp_avg_sq, &found_inf});
  check_param_and_grad(op, param, grad);
  check_state(op, "exp_avg", exp_avg, param);
  check_state(op, "exp_avg_sq", exp_avg_sq, param);
  check_found_inf(op, found_inf);
  ALLOY_CHECK(step >= 1, op, ": step counts updates from 1, got ", step);
  ALLOY_CHECK(hyper.lr >= 0.0f && hyper.eps >= 0.0f && hyper.weight_decay >= 0.0f, op,
              ": lr, eps and weight_decay must be non-negative, got ", hyper.lr, ", ", hyper.eps,
              ", ", hyper.weight_decay);
  ALLOY_CHECK(
      hyper.beta1 >= 0.0f && hyper.beta1 < 1.0f && hyper.beta2 >= 0.0f && hyper.beta2 < 1.0f, op,
      ": betas must be in [0, 1), got ", hyper.beta1, ", ", hyper.beta2);
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::adamw_update(param.raw(), param.dtype(), grad.raw(), grad.dtype(),
                         exp_avg.data<float>(), exp_avg_sq.data<float>(), param.numel(), hyper,
                         step, found_inf.defined() ? found_inf.data<float>() : nullptr,
                         cuda::stream_of(device));
      return;
    });
  if (skip_step(found_inf)) return;
  cpu::FloatOutput param_float(param, /*accumulate=*/true);
  cpu::adamw_update(param_float.data(), grad.raw(), grad.dtype(), exp_avg.data<float>(),
                    exp_avg_sq.data<float>(), param.numel(), hyper, step);
  param_float.commit();
}

}  // namespace alloy
