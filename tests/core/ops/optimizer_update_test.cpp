#include "core/ops/optimizer_update.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

// Small, and large enough for the thread pool and several blocks.
const std::int64_t kSizes[] = {7, 50001};
constexpr int kSteps = 4;

std::string describe(const char* what, DType grad_dtype, std::int64_t size, int step) {
  return std::string(what) + " grad " + dtype_name(grad_dtype) + " size " + std::to_string(size) +
         " step " + std::to_string(step);
}

// torch.optim.SGD in float64.
void sgd_reference(std::vector<double>& param, const std::vector<double>& grad,
                   std::vector<double>& buffer, const SgdHyper& h, bool first_step) {
  for (std::size_t i = 0; i < param.size(); ++i) {
    double g = h.grad_scale * grad[i] + h.weight_decay * param[i];
    if (h.momentum != 0.0f) {
      buffer[i] = first_step ? g : h.momentum * buffer[i] + (1.0 - h.dampening) * g;
      g = h.nesterov ? g + h.momentum * buffer[i] : buffer[i];
    }
    param[i] -= h.lr * g;
  }
}

// torch.optim.AdamW in float64.
void adamw_reference(std::vector<double>& param, const std::vector<double>& grad,
                     std::vector<double>& m, std::vector<double>& v, const AdamWHyper& h,
                     int step) {
  const double c1 = 1.0 - std::pow(static_cast<double>(h.beta1), step);
  const double c2 = 1.0 - std::pow(static_cast<double>(h.beta2), step);
  for (std::size_t i = 0; i < param.size(); ++i) {
    const double g = h.grad_scale * grad[i];
    param[i] *= 1.0 - static_cast<double>(h.lr) * h.weight_decay;
    m[i] = h.beta1 * m[i] + (1.0 - h.beta1) * g;
    v[i] = h.beta2 * v[i] + (1.0 - h.beta2) * g * g;
    param[i] -= h.lr / c1 * m[i] / (std::sqrt(v[i]) / std::sqrt(c2) + h.eps);
  }
}

// fp32 arithmetic on values of order one over a few steps.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(optimizer_update, TwoThreads)

BOOST_AUTO_TEST_CASE(sgd_matches_float64_pytorch_semantics) {
  Generator generator(1);
  SgdHyper plain;
  SgdHyper momentum;
  momentum.momentum = 0.9f;
  momentum.dampening = 0.1f;
  momentum.weight_decay = 1e-2f;
  SgdHyper nesterov;
  nesterov.lr = 0.05f;
  nesterov.momentum = 0.8f;
  nesterov.nesterov = true;
  nesterov.weight_decay = 5e-4f;
  nesterov.grad_scale = 1.0f / 1024.0f;  // unscaling folded into the update
  const SgdHyper* hypers[] = {&plain, &momentum, &nesterov};
  for (const SgdHyper* h : hypers) {
    for (const DType grad_dtype : {DType::f32, DType::f16, DType::bf16}) {
      for (const std::int64_t size : kSizes) {
        Tensor param = random_tensor({size}, DType::f32, generator);
        Tensor buffer = h->momentum != 0.0f ? Tensor::zeros({size}, DType::f32) : Tensor();
        auto expected_param = to_doubles(param);
        std::vector<double> expected_buffer(static_cast<std::size_t>(size), 0.0);
        for (int step = 0; step < kSteps; ++step) {
          const Tensor grad = random_tensor({size}, grad_dtype, generator, -h->lr / h->grad_scale,
                                            h->lr / h->grad_scale);
          sgd_reference(expected_param, to_doubles(grad), expected_buffer, *h, step == 0);
          sgd_update(param, grad, buffer, *h, step == 0);
          check_close(param, expected_param, kRtol, kAtol,
                      describe("sgd param", grad_dtype, size, step));
          if (h->momentum != 0.0f) {
            check_close(buffer, expected_buffer, kRtol, kAtol,
                        describe("sgd momentum", grad_dtype, size, step));
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(adamw_matches_float64_pytorch_semantics) {
  Generator generator(2);
  AdamWHyper defaults;
  AdamWHyper scaled;
  scaled.lr = 3e-3f;
  scaled.beta1 = 0.8f;
  scaled.beta2 = 0.99f;
  scaled.eps = 1e-6f;
  scaled.weight_decay = 0.1f;
  scaled.grad_scale = 1.0f / 4096.0f;  // grads up to 4096: within f16
  for (const AdamWHyper* h : {&defaults, &scaled}) {
    for (const DType grad_dtype : {DType::f32, DType::f16, DType::bf16}) {
      for (const std::int64_t size : kSizes) {
        Tensor param = random_tensor({size}, DType::f32, generator);
        Tensor m = Tensor::zeros({size}, DType::f32);
        Tensor v = Tensor::zeros({size}, DType::f32);
        auto expected_param = to_doubles(param);
        std::vector<double> expected_m(static_cast<std::size_t>(size), 0.0);
        std::vector<double> expected_v(expected_m.size(), 0.0);
        for (int step = 1; step <= kSteps; ++step) {
          const Tensor grad = random_tensor({size}, grad_dtype, generator, -1.0f / h->grad_scale,
                                            1.0f / h->grad_scale);
          adamw_reference(expected_param, to_doubles(grad), expected_m, expected_v, *h, step);
          adamw_update(param, grad, m, v, *h, step);
          check_close(param, expected_param, kRtol, kAtol,
                      describe("adamw param", grad_dtype, size, step));
          check_close(m, expected_m, kRtol, kAtol, describe("adamw m", grad_dtype, size, step));
          check_close(v, expected_v, kRtol, kAtol, describe("adamw v", grad_dtype, size, step));
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(found_inf_skips_the_step_and_zero_does_not) {
  Generator generator(3);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SgdHyper sgd;
  sgd.momentum = 0.9f;
  AdamWHyper adamw;
  for (const float flag : {1.0f, nan, 0.0f}) {
    const bool skipped = flag != 0.0f;
    const Tensor found_inf = Tensor::from_floats({1}, {flag});
    // A gradient with an inf in it: what makes the scaler raise the flag.
    Tensor grad = random_tensor({100}, DType::f16, generator);
    if (skipped) grad.half_data()[5] = 0x7c00;

    Tensor param = random_tensor({100}, DType::f32, generator);
    Tensor buffer = random_tensor({100}, DType::f32, generator);
    const auto param_before = param.to_floats();
    const auto buffer_before = buffer.to_floats();
    sgd_update(param, grad, buffer, sgd, false, found_inf);
    BOOST_TEST((param.to_floats() == param_before) == skipped, "sgd param, flag " << flag);
    BOOST_TEST((buffer.to_floats() == buffer_before) == skipped, "sgd buffer, flag " << flag);

    Tensor m = random_tensor({100}, DType::f32, generator);
    Tensor v = random_tensor({100}, DType::f32, generator, 0.0f, 1.0f);
    const auto m_before = m.to_floats();
    const auto v_before = v.to_floats();
    const auto adam_param_before = param.to_floats();
    adamw_update(param, grad, m, v, adamw, 3, found_inf);
    BOOST_TEST((param.to_floats() == adam_param_before) == skipped, "adamw param, flag " << flag);
    BOOST_TEST((m.to_floats() == m_before) == skipped, "adamw m, flag " << flag);
    BOOST_TEST((v.to_floats() == v_before) == skipped, "adamw v, flag " << flag);
  }
}

BOOST_AUTO_TEST_CASE(rejects_bad_arguments) {
  Tensor param = Tensor::zeros({4}, DType::f32);
  const Tensor grad = Tensor::zeros({4}, DType::f32);
  Tensor buffer = Tensor::zeros({4}, DType::f32);
  Tensor none;
  SgdHyper momentum;
  momentum.momentum = 0.9f;
  BOOST_CHECK_THROW(sgd_update(param, grad, none, momentum, true), Error);
  BOOST_CHECK_THROW(sgd_update(param, Tensor::zeros({5}, DType::f32), buffer, {}, true), Error);
  SgdHyper bad_nesterov;
  bad_nesterov.nesterov = true;
  BOOST_CHECK_THROW(sgd_update(param, grad, buffer, bad_nesterov, true), Error);
  SgdHyper negative_lr;
  negative_lr.lr = -1.0f;
  BOOST_CHECK_THROW(sgd_update(param, grad, buffer, negative_lr, true), Error);
  BOOST_CHECK_THROW(sgd_update(param, grad, buffer, momentum, true, Tensor::zeros({2}, DType::f32)),
                    Error);
  Tensor m = Tensor::zeros({4}, DType::f32), v = Tensor::zeros({4}, DType::f32);
  Tensor half_state = Tensor::zeros({4}, DType::f16);
  BOOST_CHECK_THROW(adamw_update(param, grad, m, v, {}, 0), Error);
  BOOST_CHECK_THROW(adamw_update(param, grad, half_state, v, {}, 1), Error);
  AdamWHyper bad_beta;
  bad_beta.beta2 = 1.0f;
  BOOST_CHECK_THROW(adamw_update(param, grad, m, v, bad_beta, 1), Error);
  // Failed calls changed nothing.
  BOOST_TEST(param.to_floats() == std::vector<float>(4, 0.0f));
  BOOST_TEST(m.to_floats() == std::vector<float>(4, 0.0f));
}

BOOST_AUTO_TEST_SUITE_END()
