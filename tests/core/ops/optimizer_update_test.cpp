// The multi-tensor SGD and AdamW updates on the CPU: against float64 references of PyTorch's
// formulas, bit for bit against the per-parameter updates they replaced, the step count and
// learning rate read from tensors, found_inf skipping a step (step count included), and
// argument checks.
#include "core/ops/optimizer_update.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "core/ops/elementwise.h"
#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

constexpr int kSteps = 4;

// One parameter with its gradient and two state tensors (momentum, or exp_avg and exp_avg_sq).
struct Param {
  Tensor value, grad, state0, state1;
};

// Parameters of mixed sizes (one element, block edges at 1024, more than the thread pool's
// threshold), dtypes and gradient dtypes: what one multi-tensor call updates together.
std::vector<Param> mixed_params(Generator& generator, float state_low = 0.0f,
                                float state_high = 0.0f) {
  const std::int64_t sizes[] = {1, 7, 1023, 1025, 4096, 50001, 300};
  const DType param_types[] = {DType::f32,  DType::f32, DType::f16, DType::f32,
                               DType::bf16, DType::f32, DType::f32};
  std::vector<Param> params;
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    Param p;
    p.value = random_tensor({sizes[i]}, param_types[i], generator);
    p.state0 = state_high > state_low
                   ? random_tensor({sizes[i]}, DType::f32, generator, state_low, state_high)
                   : Tensor::zeros({sizes[i]}, DType::f32);
    p.state1 = p.state0.clone();
    params.push_back(p);
  }
  return params;
}

// Fresh gradients, their dtypes cycling through f32, f16 and bf16.
void new_gradients(std::vector<Param>& params, Generator& generator, float range) {
  const DType grad_types[] = {DType::f32, DType::f16, DType::bf16};
  for (std::size_t i = 0; i < params.size(); ++i) {
    params[i].grad =
        random_tensor(params[i].value.shape(), grad_types[i % 3], generator, -range, range);
  }
}

std::vector<Param> clone_all(const std::vector<Param>& params) {
  std::vector<Param> copy;
  for (const Param& p : params)
    copy.push_back({p.value.clone(), p.grad, p.state0.clone(), p.state1.clone()});
  return copy;
}

std::vector<SgdTensors> sgd_list(std::vector<Param>& params) {
  std::vector<SgdTensors> list;
  for (Param& p : params)
    list.push_back({&p.value, &p.grad, &p.state0});
  return list;
}

std::vector<AdamWTensors> adamw_list(std::vector<Param>& params) {
  std::vector<AdamWTensors> list;
  for (Param& p : params)
    list.push_back({&p.value, &p.grad, &p.state0, &p.state1});
  return list;
}

// The optimizer's device scalars, here on the host.
struct Scalars {
  explicit Scalars(float rate) : lr(Tensor::from_floats({1}, {rate})) {}
  void set_lr(float rate) { lr.data<float>()[0] = rate; }
  std::int32_t count() const { return step.data<std::int32_t>()[0]; }
  Tensor lr;
  Tensor step = Tensor::zeros({2}, DType::i32);
};

// The stored bits of a tensor: equal vectors mean bitwise-equal tensors.
std::vector<std::uint32_t> bits(const Tensor& tensor) {
  std::vector<std::uint32_t> out;
  if (tensor.dtype() == DType::f32) {
    for (const float value : tensor.to_floats()) {
      std::uint32_t word;
      std::memcpy(&word, &value, sizeof word);
      out.push_back(word);
    }
  } else {
    const std::uint16_t* half = tensor.half_data();
    out.assign(half, half + tensor.numel());
  }
  return out;
}

void check_same_bits(const std::vector<Param>& actual, const std::vector<Param>& expected,
                     bool state1, const std::string& what) {
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const std::string where = what + ", parameter " + std::to_string(i) + " (" +
                              actual[i].value.str() + ", grad " +
                              dtype_name(actual[i].grad.dtype()) + ")";
    BOOST_TEST((bits(actual[i].value) == bits(expected[i].value)), where << ": value");
    BOOST_TEST((bits(actual[i].state0) == bits(expected[i].state0)), where << ": state 0");
    if (state1) {
      BOOST_TEST((bits(actual[i].state1) == bits(expected[i].state1)), where << ": state 1");
    }
  }
}

// The per-parameter updates the multi-tensor pass replaced, verbatim in their float arithmetic
// and its order (core/ops/cpu/optimizer_update.cpp before it), as the optimizers called them:
// SGD with first_step false and dampening 0, AdamW with the 1-based step count. A half
// parameter was widened whole, updated and rounded once.
struct OldSgdHyper {
  float lr, momentum, dampening, weight_decay;
  bool nesterov;
  float grad_scale;
};

void old_sgd_update(Param& param, const OldSgdHyper& h) {
  std::vector<float> p = param.value.to_floats();
  const std::vector<float> g = param.grad.to_floats();
  std::vector<float> buf = param.state0.to_floats();
  const bool first_step = false;
  const float damped = 1.0f - h.dampening;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (h.momentum == 0.0f) {
      const float d = g[i] * h.grad_scale + h.weight_decay * p[i];
      p[i] -= h.lr * d;
      continue;
    }
    const float d = g[i] * h.grad_scale + h.weight_decay * p[i];
    buf[i] = first_step ? d : h.momentum * buf[i] + damped * d;
    const float step = h.nesterov ? d + h.momentum * buf[i] : buf[i];
    p[i] -= h.lr * step;
  }
  param.value.copy_from(Tensor::from_floats(param.value.shape(), p, param.value.dtype()));
  param.state0.copy_from(Tensor::from_floats(param.state0.shape(), buf));
}

struct OldAdamWHyper {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
};

void old_adamw_update(Param& param, const OldAdamWHyper& h, std::int64_t step) {
  std::vector<float> p = param.value.to_floats();
  const std::vector<float> g = param.grad.to_floats();
  std::vector<float> m = param.state0.to_floats();
  std::vector<float> v = param.state1.to_floats();
  const double correction1 = 1.0 - std::pow(static_cast<double>(h.beta1), step);
  const double correction2 = 1.0 - std::pow(static_cast<double>(h.beta2), step);
  const float step_size = static_cast<float>(h.lr / correction1);
  const float correction2_sqrt = static_cast<float>(std::sqrt(correction2));
  const float decay = 1.0f - h.lr * h.weight_decay;
  const float one_minus_beta1 = 1.0f - h.beta1;
  const float one_minus_beta2 = 1.0f - h.beta2;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const float gi = g[i] * h.grad_scale;
    m[i] += one_minus_beta1 * (gi - m[i]);
    v[i] = h.beta2 * v[i] + one_minus_beta2 * gi * gi;
    const float denom = std::sqrt(v[i]) / correction2_sqrt + h.eps;
    p[i] = p[i] * decay - step_size * (m[i] / denom);
  }
  param.value.copy_from(Tensor::from_floats(param.value.shape(), p, param.value.dtype()));
  param.state0.copy_from(Tensor::from_floats(param.state0.shape(), m));
  param.state1.copy_from(Tensor::from_floats(param.state1.shape(), v));
}

// torch.optim.SGD (dampening 0) in float64.
void sgd_reference(std::vector<double>& param, const std::vector<double>& grad,
                   std::vector<double>& buffer, const SgdHyper& h, double lr) {
  for (std::size_t i = 0; i < param.size(); ++i) {
    double g = h.grad_scale * grad[i] + h.weight_decay * param[i];
    if (h.momentum != 0.0f) {
      buffer[i] = h.momentum * buffer[i] + g;
      g = h.nesterov ? g + h.momentum * buffer[i] : buffer[i];
    }
    param[i] -= lr * g;
  }
}

// torch.optim.AdamW in float64.
void adamw_reference(std::vector<double>& param, const std::vector<double>& grad,
                     std::vector<double>& m, std::vector<double>& v, const AdamWHyper& h, double lr,
                     int step) {
  const double c1 = 1.0 - std::pow(static_cast<double>(h.beta1), step);
  const double c2 = 1.0 - std::pow(static_cast<double>(h.beta2), step);
  for (std::size_t i = 0; i < param.size(); ++i) {
    const double g = h.grad_scale * grad[i];
    param[i] *= 1.0 - lr * h.weight_decay;
    m[i] = h.beta1 * m[i] + (1.0 - h.beta1) * g;
    v[i] = h.beta2 * v[i] + (1.0 - h.beta2) * g * g;
    param[i] -= lr / c1 * m[i] / (std::sqrt(v[i]) / std::sqrt(c2) + h.eps);
  }
}

// fp32 arithmetic on values of order one over a few steps.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

SgdHyper sgd_hyper(float momentum, float weight_decay, bool nesterov, float grad_scale) {
  SgdHyper h;
  h.momentum = momentum;
  h.weight_decay = weight_decay;
  h.nesterov = nesterov;
  h.grad_scale = grad_scale;
  return h;
}

const SgdHyper kSgdHypers[] = {
    sgd_hyper(0.0f, 0.0f, false, 1.0f), sgd_hyper(0.9f, 1e-2f, false, 1.0f),
    sgd_hyper(0.8f, 5e-4f, true, 1.0f / 1024.0f),  // unscaling folded into the update
};

AdamWHyper adamw_scaled() {
  AdamWHyper h;
  h.beta1 = 0.8f;
  h.beta2 = 0.99f;
  h.eps = 1e-6f;
  h.weight_decay = 0.1f;
  h.grad_scale = 1.0f / 4096.0f;  // grads up to 4096: within f16
  return h;
}

const AdamWHyper kAdamWHypers[] = {AdamWHyper{}, adamw_scaled()};

// The rate of each step; it changes between steps, as set_lr changes it.
float lr_at(int step, float base) {
  return step < 2 ? base : base * 0.5f;
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(optimizer_update, TwoThreads)

BOOST_AUTO_TEST_CASE(sgd_matches_float64_pytorch_semantics) {
  Generator generator(1);
  for (const SgdHyper& h : kSgdHypers) {
    std::vector<Param> params = mixed_params(generator);
    for (Param& p : params)  // the float64 reference sees fp32 parameters
      p.value = random_tensor(p.value.shape(), DType::f32, generator);
    std::vector<std::vector<double>> expected, buffers;
    for (const Param& p : params) {
      expected.push_back(to_doubles(p.value));
      buffers.emplace_back(static_cast<std::size_t>(p.value.numel()), 0.0);
    }
    Scalars scalars(0.1f);
    for (int step = 0; step < kSteps; ++step) {
      const float lr = lr_at(step, 0.1f);
      scalars.set_lr(lr);
      new_gradients(params, generator, lr / h.grad_scale);
      sgd_update(sgd_list(params), h, scalars.lr, scalars.step);
      BOOST_TEST(scalars.count() == step + 1);
      for (std::size_t i = 0; i < params.size(); ++i) {
        sgd_reference(expected[i], to_doubles(params[i].grad), buffers[i], h, lr);
        const std::string what = "sgd momentum " + std::to_string(h.momentum) + " parameter " +
                                 std::to_string(i) + " step " + std::to_string(step);
        check_close(params[i].value, expected[i], kRtol, kAtol, what);
        if (h.momentum != 0.0f) check_close(params[i].state0, buffers[i], kRtol, kAtol, what);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(adamw_matches_float64_pytorch_semantics) {
  Generator generator(2);
  for (const AdamWHyper& h : kAdamWHypers) {
    std::vector<Param> params = mixed_params(generator);
    for (Param& p : params)
      p.value = random_tensor(p.value.shape(), DType::f32, generator);
    std::vector<std::vector<double>> expected, m, v;
    for (const Param& p : params) {
      expected.push_back(to_doubles(p.value));
      m.emplace_back(static_cast<std::size_t>(p.value.numel()), 0.0);
      v.emplace_back(static_cast<std::size_t>(p.value.numel()), 0.0);
    }
    Scalars scalars(3e-3f);
    for (int step = 1; step <= kSteps; ++step) {
      const float lr = lr_at(step - 1, 3e-3f);
      scalars.set_lr(lr);
      new_gradients(params, generator, 1.0f / h.grad_scale);
      adamw_update(adamw_list(params), h, scalars.lr, scalars.step);
      BOOST_TEST(scalars.count() == step);
      for (std::size_t i = 0; i < params.size(); ++i) {
        adamw_reference(expected[i], to_doubles(params[i].grad), m[i], v[i], h, lr, step);
        const std::string what = "adamw beta1 " + std::to_string(h.beta1) + " parameter " +
                                 std::to_string(i) + " step " + std::to_string(step);
        check_close(params[i].value, expected[i], kRtol, kAtol, what + " param");
        check_close(params[i].state0, m[i], kRtol, kAtol, what + " exp_avg");
        check_close(params[i].state1, v[i], kRtol, kAtol, what + " exp_avg_sq");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(multi_tensor_sgd_is_bit_identical_to_the_per_parameter_update) {
  Generator generator(4);
  for (const SgdHyper& h : kSgdHypers) {
    // Nonzero buffers, as after earlier steps.
    std::vector<Param> params = mixed_params(generator, -0.1f, 0.1f);
    std::vector<Param> expected = clone_all(params);
    Scalars scalars(0.05f);
    for (int step = 0; step < kSteps; ++step) {
      const float lr = lr_at(step, 0.05f);
      scalars.set_lr(lr);
      new_gradients(params, generator, 1.0f / h.grad_scale);
      sgd_update(sgd_list(params), h, scalars.lr, scalars.step);
      for (std::size_t i = 0; i < params.size(); ++i) {
        expected[i].grad = params[i].grad;
        old_sgd_update(expected[i],
                       {lr, h.momentum, 0.0f, h.weight_decay, h.nesterov, h.grad_scale});
      }
      check_same_bits(
          params, expected, false,
          "sgd momentum " + std::to_string(h.momentum) + " step " + std::to_string(step));
    }
  }
}

BOOST_AUTO_TEST_CASE(multi_tensor_adamw_is_bit_identical_to_the_per_parameter_update) {
  Generator generator(5);
  for (const AdamWHyper& h : kAdamWHypers) {
    std::vector<Param> params = mixed_params(generator);
    std::vector<Param> expected = clone_all(params);
    Scalars scalars(1e-3f);
    for (int step = 1; step <= kSteps; ++step) {
      const float lr = lr_at(step - 1, 1e-3f);
      scalars.set_lr(lr);
      new_gradients(params, generator, 1.0f / h.grad_scale);
      adamw_update(adamw_list(params), h, scalars.lr, scalars.step);
      for (std::size_t i = 0; i < params.size(); ++i) {
        expected[i].grad = params[i].grad;
        old_adamw_update(expected[i], {lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_scale},
                         step);
      }
      check_same_bits(params, expected, true,
                      "adamw beta1 " + std::to_string(h.beta1) + " step " + std::to_string(step));
    }
  }
}

// O2's model copy written by the update (Apex's fused optimizers): the same bits as the update
// followed by a separate cast of each updated parameter, as the master -> model pass did, in
// f16 and bf16; a skipped step writes no copy.
BOOST_AUTO_TEST_CASE(the_model_copy_is_the_updated_parameter_rounded_once) {
  Generator generator(6);
  for (const DType copy_dtype : {DType::f16, DType::bf16}) {
    for (const bool adamw : {false, true}) {
      std::vector<Param> params = mixed_params(generator, -0.1f, 0.1f);
      std::vector<Tensor> copies;
      for (const Param& p : params)
        copies.push_back(Tensor::zeros(p.value.shape(), copy_dtype));
      // Masters are f32 (a half parameter's copy would be rounded twice: refused below).
      const auto has_copy = [&](std::size_t i) { return params[i].value.dtype() == DType::f32; };
      Scalars scalars(1e-2f);
      for (int step = 0; step < kSteps; ++step) {
        BOOST_TEST_CONTEXT(dtype_name(copy_dtype)
                           << (adamw ? " adamw" : " sgd") << " step " << step) {
          new_gradients(params, generator, 1.0f);
          // The last step is skipped: the copy keeps the previous step's rounding.
          const bool skip = step == kSteps - 1;
          const Tensor found_inf = Tensor::from_floats({1}, {skip ? 1.0f : 0.0f});
          const std::vector<Tensor> before = [&] {
            std::vector<Tensor> out;
            for (const Tensor& copy : copies)
              out.push_back(copy.clone());
            return out;
          }();
          if (adamw) {
            std::vector<AdamWTensors> list = adamw_list(params);
            for (std::size_t i = 0; i < list.size(); ++i)
              if (has_copy(i)) list[i].model_copy = &copies[i];
            adamw_update(list, adamw_scaled(), scalars.lr, scalars.step, found_inf);
          } else {
            std::vector<SgdTensors> list = sgd_list(params);
            for (std::size_t i = 0; i < list.size(); ++i)
              if (has_copy(i)) list[i].model_copy = &copies[i];
            sgd_update(list, kSgdHypers[2], scalars.lr, scalars.step, found_inf);
          }
          for (std::size_t i = 0; i < params.size(); ++i) {
            if (!has_copy(i)) continue;
            if (skip) {
              BOOST_TEST((bits(copies[i]) == bits(before[i])), "parameter " << i);
              continue;
            }
            Tensor expected = Tensor::zeros(params[i].value.shape(), copy_dtype);
            cast_into(params[i].value, expected);
            BOOST_TEST((bits(copies[i]) == bits(expected)), "parameter " << i);
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(found_inf_skips_the_step_and_its_count_and_zero_does_not) {
  Generator generator(3);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const SgdHyper& sgd = kSgdHypers[1];
  for (const float flag : {1.0f, nan, 0.0f}) {
    const bool skipped = flag != 0.0f;
    const Tensor found_inf = Tensor::from_floats({1}, {flag});
    std::vector<Param> params = mixed_params(generator, 0.0f, 1.0f);
    new_gradients(params, generator, 1.0f);
    // An inf in a gradient: what makes the scaler raise the flag.
    if (skipped) params[1].grad.half_data()[5] = 0x7c00;  // f16
    const std::vector<Param> before = clone_all(params);
    const std::string what = "flag " + std::to_string(flag);

    Scalars scalars(0.1f);
    scalars.step.data<std::int32_t>()[0] = 3;
    sgd_update(sgd_list(params), sgd, scalars.lr, scalars.step, found_inf);
    BOOST_TEST(scalars.count() == (skipped ? 3 : 4), "sgd step count, " << what);
    for (std::size_t i = 0; i < params.size(); ++i) {
      BOOST_TEST((bits(params[i].value) == bits(before[i].value)) == skipped, "sgd, " << what);
      BOOST_TEST((bits(params[i].state0) == bits(before[i].state0)) == skipped, "sgd, " << what);
    }

    const std::vector<Param> before_adamw = clone_all(params);
    adamw_update(adamw_list(params), AdamWHyper{}, scalars.lr, scalars.step, found_inf);
    BOOST_TEST(scalars.count() == (skipped ? 3 : 5), "adamw step count, " << what);
    for (std::size_t i = 0; i < params.size(); ++i) {
      BOOST_TEST((bits(params[i].value) == bits(before_adamw[i].value)) == skipped,
                 "adamw, " << what);
      BOOST_TEST((bits(params[i].state0) == bits(before_adamw[i].state0)) == skipped,
                 "adamw m, " << what);
      BOOST_TEST((bits(params[i].state1) == bits(before_adamw[i].state1)) == skipped,
                 "adamw v, " << what);
    }
  }
}

BOOST_AUTO_TEST_CASE(adamw_after_a_skipped_step_continues_as_if_it_had_not_happened) {
  // Run A: steps 1, 2 (skipped: found_inf set), 3. Run B: steps 1 and 3 only. The skipped step
  // keeps the step count, so step 3 has the bias correction of t = 2 in both runs.
  Generator generator(6);
  const AdamWHyper h = adamw_scaled();
  std::vector<Param> a = mixed_params(generator);
  std::vector<Param> b = clone_all(a);
  std::vector<Param> counted = clone_all(a);  // as A, if a skipped step counted
  Scalars scalars_a(1e-2f), scalars_b(1e-2f), scalars_counted(1e-2f);
  const Tensor clean = Tensor::from_floats({1}, {0.0f});
  const Tensor overflow = Tensor::from_floats({1}, {1.0f});

  const auto step = [&](std::vector<Param>& params, Scalars& scalars, const Tensor& found_inf) {
    adamw_update(adamw_list(params), h, scalars.lr, scalars.step, found_inf);
  };
  const auto set_gradients = [&](std::uint64_t seed) {
    Generator g(seed);
    new_gradients(a, g, 1000.0f);
    for (std::size_t i = 0; i < a.size(); ++i)
      b[i].grad = counted[i].grad = a[i].grad;
  };

  set_gradients(61);
  step(a, scalars_a, clean);
  step(b, scalars_b, clean);
  step(counted, scalars_counted, clean);
  BOOST_TEST(scalars_a.count() == 1);

  set_gradients(62);
  a[3].grad.data<float>()[17] = std::numeric_limits<float>::infinity();
  step(a, scalars_a, overflow);
  BOOST_TEST(scalars_a.count() == 1);  // the count before the skipped step
  scalars_counted.step.data<std::int32_t>()[0] += 1;

  set_gradients(63);
  step(a, scalars_a, clean);
  step(b, scalars_b, clean);
  step(counted, scalars_counted, clean);
  BOOST_TEST(scalars_a.count() == 2);
  BOOST_TEST(scalars_b.count() == 2);
  check_same_bits(a, b, true, "with and without the skipped step");

  // The test can tell: counting the skipped step (t = 3 at the last step) changes the result.
  bool any_differs = false;
  for (std::size_t i = 0; i < a.size(); ++i)
    any_differs |= bits(a[i].value) != bits(counted[i].value);
  BOOST_TEST(any_differs);
}

// Gradient-norm clipping's coefficient applied by the update (grad_factor, read where it
// lives): the same bits as the update on gradients multiplied by it beforehand, fl(g * c) in
// f32, for gradients of every dtype, with grad_scale 1 and with a power-of-two grad_scale
// (whose product with c is exact); a NaN factor poisons the parameters as a NaN gradient would.
// With grad_unscale u too (O2's 1/loss scale, not a power of two here): fl(fl(g * u) * c), u
// first, each product rounded on its own, the bits of an fp32 copy unscaled and then clipped.
BOOST_AUTO_TEST_CASE(grad_factor_equals_gradients_multiplied_by_it_beforehand) {
  Generator generator(7);
  const Tensor factor = Tensor::from_floats({1}, {0.37126f});
  const Tensor unscale = Tensor::from_floats({1}, {1.0f / 3072.0f});
  // f32: fl(g * c) or fl(fl(g * u) * c), no other rounding.
  const auto premultiplied = [&](const Tensor& grad, bool unscaled) {
    return multiplied(unscaled ? multiplied(grad, unscale.data<float>()[0]) : grad,
                      factor.data<float>()[0]);
  };
  for (const bool unscaled : {false, true}) {
    const Tensor grad_unscale = unscaled ? unscale : Tensor();
    for (const bool adamw : {false, true}) {
      for (int hyper = 0; hyper < (adamw ? 2 : 3); ++hyper) {
        BOOST_TEST_CONTEXT((adamw ? "adamw " : "sgd ") << hyper << (unscaled ? " unscaled" : "")) {
          std::vector<Param> params = mixed_params(generator, -0.1f, 0.1f);
          std::vector<Param> expected = clone_all(params);
          Scalars scalars(1e-2f), expected_scalars(1e-2f);
          for (int step = 0; step < kSteps; ++step) {
            const float grad_scale =
                adamw ? kAdamWHypers[hyper].grad_scale : kSgdHypers[hyper].grad_scale;
            new_gradients(params, generator, (unscaled ? 3072.0f : 1.0f) / grad_scale);
            for (std::size_t i = 0; i < params.size(); ++i)
              expected[i].grad = premultiplied(params[i].grad, unscaled);
            if (adamw) {
              adamw_update(adamw_list(params), kAdamWHypers[hyper], scalars.lr, scalars.step, {},
                           factor, grad_unscale);
              adamw_update(adamw_list(expected), kAdamWHypers[hyper], expected_scalars.lr,
                           expected_scalars.step);
            } else {
              sgd_update(sgd_list(params), kSgdHypers[hyper], scalars.lr, scalars.step, {}, factor,
                         grad_unscale);
              sgd_update(sgd_list(expected), kSgdHypers[hyper], expected_scalars.lr,
                         expected_scalars.step);
            }
            check_same_bits(params, expected, adamw, "step " + std::to_string(step));
          }
          BOOST_TEST(scalars.count() == kSteps);
        }
      }
    }
  }
  // The factor changes the result (else the comparison above proves nothing), and NaN poisons.
  std::vector<Param> params = mixed_params(generator);
  new_gradients(params, generator, 1.0f);
  std::vector<Param> unscaled = clone_all(params);
  Scalars scalars(0.1f);
  sgd_update(sgd_list(params), kSgdHypers[0], scalars.lr, scalars.step, {}, factor);
  sgd_update(sgd_list(unscaled), kSgdHypers[0], scalars.lr, scalars.step);
  BOOST_TEST((bits(params[0].value) != bits(unscaled[0].value)));
  const Tensor nan = Tensor::from_floats({1}, {std::numeric_limits<float>::quiet_NaN()});
  sgd_update(sgd_list(params), kSgdHypers[0], scalars.lr, scalars.step, {}, nan);
  BOOST_TEST(std::isnan(params[0].value.to_floats()[0]));
  BOOST_CHECK_THROW(sgd_update(sgd_list(params), kSgdHypers[0], scalars.lr, scalars.step, {},
                               Tensor::zeros({2}, DType::f32)),
                    Error);
  BOOST_CHECK_THROW(sgd_update(sgd_list(params), kSgdHypers[0], scalars.lr, scalars.step, {},
                               Tensor::zeros({1}, DType::i32)),
                    Error);
  BOOST_CHECK_THROW(sgd_update(sgd_list(params), kSgdHypers[0], scalars.lr, scalars.step, {}, {},
                               Tensor::zeros({2}, DType::f32)),
                    Error);
}

BOOST_AUTO_TEST_CASE(an_empty_list_changes_nothing) {
  Scalars scalars(0.1f);
  sgd_update({}, SgdHyper{}, scalars.lr, scalars.step);
  adamw_update({}, AdamWHyper{}, scalars.lr, scalars.step);
  BOOST_TEST(scalars.count() == 0);
}

BOOST_AUTO_TEST_CASE(rejects_bad_arguments) {
  Tensor param = Tensor::zeros({4}, DType::f32);
  Tensor grad = Tensor::zeros({4}, DType::f32);
  Tensor wrong_grad = Tensor::zeros({5}, DType::f32);
  Tensor buffer = Tensor::zeros({4}, DType::f32);
  Tensor half_state = Tensor::zeros({4}, DType::f16);
  Tensor labels = Tensor::zeros({4}, DType::i32);
  Scalars scalars(0.1f);
  const SgdHyper momentum = kSgdHypers[1];
  const std::vector<SgdTensors> good{{&param, &grad, &buffer}};

  BOOST_CHECK_THROW(sgd_update({{&param, &grad, nullptr}}, momentum, scalars.lr, scalars.step),
                    Error);
  BOOST_CHECK_THROW(
      sgd_update({{&param, &wrong_grad, &buffer}}, momentum, scalars.lr, scalars.step), Error);
  BOOST_CHECK_THROW(sgd_update({{&labels, &grad, &buffer}}, momentum, scalars.lr, scalars.step),
                    Error);
  // A model copy of another shape, not floating, or of a half parameter.
  Tensor half_param = Tensor::zeros({4}, DType::f16);
  Tensor copy = Tensor::zeros({4}, DType::bf16);
  BOOST_CHECK_THROW(
      sgd_update({{&half_param, &grad, &buffer, &copy}}, momentum, scalars.lr, scalars.step),
      Error);
  Tensor short_copy = Tensor::zeros({3}, DType::f16);
  BOOST_CHECK_THROW(
      sgd_update({{&param, &grad, &buffer, &short_copy}}, momentum, scalars.lr, scalars.step),
      Error);
  BOOST_CHECK_THROW(
      sgd_update({{&param, &grad, &buffer, &labels}}, momentum, scalars.lr, scalars.step), Error);
  SgdHyper bad_nesterov;
  bad_nesterov.nesterov = true;
  BOOST_CHECK_THROW(sgd_update(good, bad_nesterov, scalars.lr, scalars.step), Error);
  SgdHyper negative;
  negative.weight_decay = -1.0f;
  BOOST_CHECK_THROW(sgd_update(good, negative, scalars.lr, scalars.step), Error);
  BOOST_CHECK_THROW(
      sgd_update(good, momentum, scalars.lr, scalars.step, Tensor::zeros({2}, DType::f32)), Error);
  // The scalars: lr f32 [1], step i32 [2].
  Tensor step_f32 = Tensor::zeros({2}, DType::f32);
  Tensor step_short = Tensor::zeros({1}, DType::i32);
  BOOST_CHECK_THROW(sgd_update(good, momentum, scalars.lr, step_f32), Error);
  BOOST_CHECK_THROW(sgd_update(good, momentum, scalars.lr, step_short), Error);
  BOOST_CHECK_THROW(sgd_update(good, momentum, Tensor::zeros({2}, DType::f32), scalars.step),
                    Error);
  BOOST_CHECK_THROW(sgd_update(good, momentum, Tensor(), scalars.step), Error);

  Tensor m = Tensor::zeros({4}, DType::f32), v = Tensor::zeros({4}, DType::f32);
  BOOST_CHECK_THROW(
      adamw_update({{&param, &grad, &half_state, &v}}, AdamWHyper{}, scalars.lr, scalars.step),
      Error);
  BOOST_CHECK_THROW(
      adamw_update({{&param, &grad, &m, nullptr}}, AdamWHyper{}, scalars.lr, scalars.step), Error);
  AdamWHyper bad_beta;
  bad_beta.beta2 = 1.0f;
  BOOST_CHECK_THROW(adamw_update({{&param, &grad, &m, &v}}, bad_beta, scalars.lr, scalars.step),
                    Error);
  // A bad entry anywhere in the list fails the call before anything is updated.
  Tensor other = Tensor::zeros({4}, DType::f32);
  grad.fill(1.0f);
  BOOST_CHECK_THROW(sgd_update({{&other, &grad, &buffer}, {&param, &wrong_grad, &buffer}}, momentum,
                               scalars.lr, scalars.step),
                    Error);
  BOOST_TEST(other.to_floats() == std::vector<float>(4, 0.0f));
  BOOST_TEST(param.to_floats() == std::vector<float>(4, 0.0f));
  BOOST_TEST(m.to_floats() == std::vector<float>(4, 0.0f));
  BOOST_TEST(scalars.count() == 0);
}

BOOST_AUTO_TEST_SUITE_END()
