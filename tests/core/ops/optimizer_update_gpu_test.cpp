// Fused CUDA SGD and AdamW against the CPU updates over several steps, for f32 and half
// parameters and gradients; found_inf read on the device skips the step (1 or NaN) or not (0).
#include <boost/test/unit_test.hpp>

#include "core/ops/optimizer_update.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

namespace {
const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
const Shape kShape{5000};
}  // namespace

BOOST_AUTO_TEST_SUITE(optimizer_update_gpu)

BOOST_AUTO_TEST_CASE(sgd_matches_the_cpu) {
  Generator generator(91);
  SgdHyper plain;
  SgdHyper nesterov;
  nesterov.momentum = 0.9f;
  nesterov.nesterov = true;
  nesterov.weight_decay = 1e-4f;
  nesterov.grad_scale = 1.0f / 1024.0f;
  for (const SgdHyper& hyper : {plain, nesterov}) {
    for (const DType param_type : kFloatTypes) {
      for (const DType grad_type : kFloatTypes) {
        Tensor param = random_tensor(kShape, param_type, generator);
        Tensor buffer = Tensor::zeros(kShape, DType::f32);
        Tensor param_gpu = to_cuda(param), buffer_gpu = to_cuda(buffer);
        for (int step = 0; step < 3; ++step) {
          const Tensor grad = random_tensor(kShape, grad_type, generator, -500.0f, 500.0f);
          sgd_update(param, grad, buffer, hyper, step == 0);
          sgd_update(param_gpu, to_cuda(grad), buffer_gpu, hyper, step == 0);
        }
        const std::string what = std::string("sgd ") + dtype_name(param_type) + " params, " +
                                 dtype_name(grad_type) + " grads, momentum " +
                                 std::to_string(hyper.momentum);
        check_gpu_close(param_gpu, param, what, gpu_tolerance(param_type), 1e-6);
        if (hyper.momentum != 0.0f) check_gpu_close(buffer_gpu, buffer, what, 1e-5, 1e-7);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(adamw_matches_the_cpu) {
  Generator generator(92);
  AdamWHyper hyper;
  hyper.grad_scale = 0.5f;
  for (const DType param_type : kFloatTypes) {
    for (const DType grad_type : kFloatTypes) {
      Tensor param = random_tensor(kShape, param_type, generator);
      Tensor m = Tensor::zeros(kShape, DType::f32), v = Tensor::zeros(kShape, DType::f32);
      Tensor param_gpu = to_cuda(param), m_gpu = to_cuda(m), v_gpu = to_cuda(v);
      for (std::int64_t step = 1; step <= 4; ++step) {
        const Tensor grad = random_tensor(kShape, grad_type, generator);
        adamw_update(param, grad, m, v, hyper, step);
        adamw_update(param_gpu, to_cuda(grad), m_gpu, v_gpu, hyper, step);
      }
      const std::string what = std::string("adamw ") + dtype_name(param_type) + " params, " +
                               dtype_name(grad_type) + " grads";
      check_gpu_close(param_gpu, param, what, gpu_tolerance(param_type), 1e-6);
      check_gpu_close(m_gpu, m, what + " exp_avg", 1e-5, 1e-7);
      check_gpu_close(v_gpu, v, what + " exp_avg_sq", 1e-5, 1e-9);
    }
  }
}

BOOST_AUTO_TEST_CASE(found_inf_on_the_device_skips_the_step) {
  Generator generator(93);
  for (const float flag : {1.0f, NAN, 0.0f}) {
    const Tensor param = random_tensor(kShape, DType::f32, generator);
    const Tensor grad = random_tensor(kShape, DType::f16, generator);
    const Tensor found_inf = to_cuda(Tensor::from_floats({1}, {flag}));
    Tensor sgd_param = to_cuda(param), adam_param = to_cuda(param);
    Tensor buffer = to_cuda(Tensor::zeros(kShape, DType::f32));
    Tensor m = to_cuda(Tensor::zeros(kShape, DType::f32));
    Tensor v = to_cuda(Tensor::zeros(kShape, DType::f32));
    SgdHyper sgd;
    sgd.momentum = 0.9f;
    sgd_update(sgd_param, to_cuda(grad), buffer, sgd, true, found_inf);
    adamw_update(adam_param, to_cuda(grad), m, v, AdamWHyper{}, 1, found_inf);
    Tensor expected_sgd = param.clone(), expected_adam = param.clone();
    Tensor cpu_buffer = Tensor::zeros(kShape, DType::f32);
    Tensor cpu_m = Tensor::zeros(kShape, DType::f32), cpu_v = Tensor::zeros(kShape, DType::f32);
    const Tensor cpu_flag = Tensor::from_floats({1}, {flag});
    sgd_update(expected_sgd, grad, cpu_buffer, sgd, true, cpu_flag);
    adamw_update(expected_adam, grad, cpu_m, cpu_v, AdamWHyper{}, 1, cpu_flag);
    const std::string what = "found_inf " + std::to_string(flag);
    check_gpu_close(sgd_param, expected_sgd, "sgd with " + what, 1e-6, 1e-7);
    check_gpu_close(adam_param, expected_adam, "adamw with " + what, 1e-6, 1e-7);
    if (flag != 0.0f) check_gpu_equal(sgd_param, param, "sgd skipped with " + what);
  }
}

BOOST_AUTO_TEST_SUITE_END()
