// The multi-tensor CUDA SGD and AdamW against the CPU over several steps, on lists mixing f32
// and half parameters and gradients; lr and the step count read from device memory; found_inf
// read on the device skips the step and its count (1 or NaN) or not (0); a gradient factor read
// on the device (clipping's coefficient); a list longer than one launch holds still advances the
// count once per step.
//
// Tolerance: the CPU and CUDA kernels do the same float operations in the same order, but GCC
// (with -march=native; none in a portable build) and nvcc each contract a * b + c into fused
// multiply-adds where they choose, and the device's double pow (AdamW's bias corrections) may
// differ from glibc's in the last place of a double. So results agree to a few units in the
// last place, rather than bit for bit: of their storage (gpu_tolerance), and of the terms each
// update adds, which can cancel to a result far smaller than themselves (param -= lr * g with
// |lr * g| ~ 50 leaving 0.012, seen on an H200: a 4.6e-4 relative difference that is 2^-23 of
// the terms).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "core/ops/elementwise.h"
#include "core/ops/optimizer_update.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

struct Param {
  Tensor value, grad, state0, state1;
};

// Per element, the sum over updates of |before| + |after| on the CPU: a bound on the terms the
// updates added (|after - before| is at most that), whose roundings the devices may differ by.
struct Terms {
  std::vector<float> value, state0, state1;
};

void add_abs(std::vector<float>& sum, const Tensor& host) {
  const std::vector<float> values = host.to_floats();
  for (std::size_t j = 0; j < values.size(); ++j)
    sum[j] += std::fabs(values[j]);
}

// Four fp32 roundings of the terms: an update is a few multiply-adds, each of which one side
// may fuse and the other round twice.
constexpr double kContraction = 0x1p-21;

// Host and device copies of the same parameters and scalars.
struct Twin {
  std::vector<Param> cpu, gpu;
  std::vector<Terms> terms;  // per parameter, of the CPU's updates
  Tensor cpu_lr, cpu_step, gpu_lr, gpu_step;

  explicit Twin(float lr)
      : cpu_lr(Tensor::from_floats({1}, {lr})),
        cpu_step(Tensor::zeros({2}, DType::i32)),
        gpu_lr(to_cuda(cpu_lr)),
        gpu_step(to_cuda(cpu_step)) {}

  void add(const Tensor& value) {
    const Tensor zeros = Tensor::zeros(value.shape(), DType::f32);
    cpu.push_back({value.clone(), Tensor(), zeros.clone(), zeros.clone()});
    gpu.push_back({to_cuda(value), Tensor(), to_cuda(zeros), to_cuda(zeros)});
    const std::vector<float> none(static_cast<std::size_t>(value.numel()), 0.0f);
    terms.push_back({none, none, none});
  }
  // Called before and after each CPU update.
  void add_terms() {
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      add_abs(terms[i].value, cpu[i].value);
      add_abs(terms[i].state0, cpu[i].state0);
      add_abs(terms[i].state1, cpu[i].state1);
    }
  }
  void new_gradients(Generator& generator, float range) {
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      cpu[i].grad =
          random_tensor(cpu[i].value.shape(), kFloatTypes[(i / 3) % 3], generator, -range, range);
      gpu[i].grad = to_cuda(cpu[i].grad);
    }
  }
  void set_lr(float lr) {
    cpu_lr.data<float>()[0] = lr;
    gpu_lr.copy_from(cpu_lr);
  }
  std::int32_t gpu_count() const { return to_host(gpu_step).data<std::int32_t>()[0]; }
  std::int32_t gpu_tickets() const { return to_host(gpu_step).data<std::int32_t>()[1]; }
  std::int32_t cpu_count() const { return cpu_step.data<std::int32_t>()[0]; }

  // found_inf and factor: host tensors (or undefined), uploaded for the GPU's update.
  void sgd(const SgdHyper& h, const Tensor& found_inf = {}, const Tensor& factor = {},
           const Tensor& unscale = {}) {
    add_terms();
    sgd_update(sgd_list(cpu), h, cpu_lr, cpu_step, found_inf, factor, unscale);
    add_terms();
    sgd_update(sgd_list(gpu), h, gpu_lr, gpu_step, on_gpu(found_inf), on_gpu(factor),
               on_gpu(unscale));
  }
  void adamw(const AdamWHyper& h, const Tensor& found_inf = {}, const Tensor& factor = {},
             const Tensor& unscale = {}) {
    add_terms();
    adamw_update(adamw_list(cpu), h, cpu_lr, cpu_step, found_inf, factor, unscale);
    add_terms();
    adamw_update(adamw_list(gpu), h, gpu_lr, gpu_step, on_gpu(found_inf), on_gpu(factor),
                 on_gpu(unscale));
  }
  static Tensor on_gpu(const Tensor& host) { return host.defined() ? to_cuda(host) : Tensor(); }

  void check(const std::string& what, bool adam) const {
    BOOST_TEST(gpu_count() == cpu_count(), what << ": step count");
    BOOST_TEST(gpu_tickets() == 0, what << ": block tickets back at zero");
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      const std::string where = what + ", parameter " + std::to_string(i) + " (" +
                                cpu[i].value.str() + ", grad " + dtype_name(cpu[i].grad.dtype()) +
                                ")";
      const auto terms_of = [&](const std::vector<float>& sums) {
        return Tensor::from_floats(cpu[i].value.shape(), sums);
      };
      check_gpu_close_to_magnitude(gpu[i].value, cpu[i].value, terms_of(terms[i].value), where,
                                   gpu_tolerance(cpu[i].value.dtype()), 1e-6, kContraction);
      check_gpu_close_to_magnitude(gpu[i].state0, cpu[i].state0, terms_of(terms[i].state0),
                                   where + " state 0", 1e-5, 1e-7, kContraction);
      if (adam) {
        check_gpu_close_to_magnitude(gpu[i].state1, cpu[i].state1, terms_of(terms[i].state1),
                                     where + " state 1", 1e-5, 1e-9, kContraction);
      }
    }
  }

  static std::vector<SgdTensors> sgd_list(std::vector<Param>& params) {
    std::vector<SgdTensors> list;
    for (Param& p : params)
      list.push_back({&p.value, &p.grad, &p.state0});
    return list;
  }
  static std::vector<AdamWTensors> adamw_list(std::vector<Param>& params) {
    std::vector<AdamWTensors> list;
    for (Param& p : params)
      list.push_back({&p.value, &p.grad, &p.state0, &p.state1});
    return list;
  }
};

// Every (parameter dtype, gradient dtype) pair, in sizes from one element to several blocks.
Twin mixed(Generator& generator, float lr) {
  Twin twin(lr);
  const std::int64_t sizes[] = {1, 1023, 5000, 70001, 3, 4096, 300, 1025, 20000};
  for (std::size_t i = 0; i < std::size(sizes); ++i)
    twin.add(random_tensor({sizes[i]}, kFloatTypes[i % 3], generator));
  return twin;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optimizer_update_gpu)

// O2's model copy written by the update: on the GPU the same bits as the update without it
// followed by a separate cast (what the master -> model kernel did), and like the CPU's copy
// within tolerance; SGD and AdamW, f16 and bf16 copies, over one launch's worth of tensors.
BOOST_AUTO_TEST_CASE(the_model_copy_equals_a_separate_cast_and_matches_the_cpu) {
  Generator generator(47);
  const std::int64_t sizes[] = {1, 1023, 5000, 70001, 300};
  for (const DType copy_dtype : {DType::f16, DType::bf16}) {
    for (const bool adamw : {false, true}) {
      const std::string what = std::string(dtype_name(copy_dtype)) + (adamw ? " adamw" : " sgd");
      // Three runs of the same fp32 masters: GPU with copies, GPU then a cast, CPU with copies.
      std::vector<Param> fused, separate, cpu;
      std::vector<Tensor> fused_copies, cast_copies, cpu_copies;
      for (const std::int64_t size : sizes) {
        const Tensor value = random_tensor({size}, DType::f32, generator);
        const Tensor grad = random_tensor({size}, DType::f16, generator, -1.0f, 1.0f);
        const Tensor zeros = Tensor::zeros({size}, DType::f32);
        fused.push_back({to_cuda(value), to_cuda(grad), to_cuda(zeros), to_cuda(zeros)});
        separate.push_back({to_cuda(value), to_cuda(grad), to_cuda(zeros), to_cuda(zeros)});
        cpu.push_back({value.clone(), grad, zeros.clone(), zeros.clone()});
        fused_copies.push_back(to_cuda(Tensor::zeros({size}, copy_dtype)));
        cast_copies.push_back(to_cuda(Tensor::zeros({size}, copy_dtype)));
        cpu_copies.push_back(Tensor::zeros({size}, copy_dtype));
      }
      const Tensor lr = Tensor::from_floats({1}, {1e-2f});
      const Tensor gpu_lr = to_cuda(lr);
      Tensor step_fused = to_cuda(Tensor::zeros({2}, DType::i32));
      Tensor step_separate = to_cuda(Tensor::zeros({2}, DType::i32));
      Tensor step_cpu = Tensor::zeros({2}, DType::i32);
      SgdHyper sgd;
      sgd.momentum = 0.9f;
      sgd.weight_decay = 1e-4f;
      const auto update = [&](std::vector<Param>& params, std::vector<Tensor>* copies,
                              const Tensor& rate, Tensor& step) {
        if (adamw) {
          std::vector<AdamWTensors> list = Twin::adamw_list(params);
          for (std::size_t i = 0; copies && i < list.size(); ++i)
            list[i].model_copy = &(*copies)[i];
          adamw_update(list, AdamWHyper{}, rate, step);
        } else {
          std::vector<SgdTensors> list = Twin::sgd_list(params);
          for (std::size_t i = 0; copies && i < list.size(); ++i)
            list[i].model_copy = &(*copies)[i];
          sgd_update(list, sgd, rate, step);
        }
      };
      for (int step = 0; step < 3; ++step) {
        update(fused, &fused_copies, gpu_lr, step_fused);
        update(separate, nullptr, gpu_lr, step_separate);
        update(cpu, &cpu_copies, lr, step_cpu);
        for (std::size_t i = 0; i < std::size(sizes); ++i) {
          cast_into(separate[i].value, cast_copies[i]);
          const std::string where =
              what + " step " + std::to_string(step) + ", tensor " + std::to_string(i);
          check_gpu_equal(fused[i].value, to_host(separate[i].value), where + " master");
          check_gpu_equal(fused_copies[i], to_host(cast_copies[i]), where + " copy");
          check_gpu_close(fused_copies[i], cpu_copies[i], where + " copy vs cpu",
                          gpu_tolerance(copy_dtype), 1e-6);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(sgd_matches_the_cpu) {
  Generator generator(91);
  SgdHyper plain;
  SgdHyper nesterov;
  nesterov.momentum = 0.9f;
  nesterov.nesterov = true;
  nesterov.weight_decay = 1e-4f;
  nesterov.grad_scale = 1.0f / 1024.0f;
  for (const SgdHyper& hyper : {plain, nesterov}) {
    Twin twin = mixed(generator, 0.1f);
    for (int step = 0; step < 3; ++step) {
      twin.set_lr(step < 2 ? 0.1f : 0.03f);  // read from device memory at each step
      twin.new_gradients(generator, 500.0f);
      twin.sgd(hyper);
    }
    twin.check("sgd momentum " + std::to_string(hyper.momentum), false);
  }
}

BOOST_AUTO_TEST_CASE(adamw_matches_the_cpu) {
  Generator generator(92);
  AdamWHyper hyper;
  hyper.grad_scale = 0.5f;
  Twin twin = mixed(generator, 1e-3f);
  for (int step = 1; step <= 4; ++step) {
    twin.set_lr(step < 3 ? 1e-3f : 4e-4f);
    twin.new_gradients(generator, 1.0f);
    twin.adamw(hyper);
  }
  BOOST_TEST(twin.gpu_count() == 4);
  twin.check("adamw", true);
}

BOOST_AUTO_TEST_CASE(found_inf_on_the_device_skips_the_step_and_its_count) {
  Generator generator(93);
  for (const float flag : {1.0f, NAN, 0.0f}) {
    const std::string what = "found_inf " + std::to_string(flag);
    const Tensor found_inf = Tensor::from_floats({1}, {flag});
    Twin twin = mixed(generator, 1e-2f);
    SgdHyper sgd;
    sgd.momentum = 0.9f;
    // A clean step first, then one with the flag.
    twin.new_gradients(generator, 1.0f);
    twin.adamw(AdamWHyper{});
    twin.new_gradients(generator, 1.0f);
    std::vector<Tensor> before;
    for (const Param& p : twin.gpu)
      before.push_back(to_host(p.value));
    twin.adamw(AdamWHyper{}, found_inf);
    twin.sgd(sgd, found_inf);
    BOOST_TEST(twin.gpu_count() == (flag != 0.0f ? 1 : 3), what);
    twin.check("adamw and sgd with " + what, true);
    if (flag != 0.0f) {
      for (std::size_t i = 0; i < before.size(); ++i)
        check_gpu_equal(twin.gpu[i].value, before[i], "skipped with " + what);
    }
  }
}

// Gradient-norm clipping's coefficient read on the device: like the CPU's update with the same
// factor, and on the GPU the same bits as the update on gradients multiplied by it beforehand
// (fl(g * c) in f32, computed here on the host). With O2's grad_unscale u too: fl(fl(g * u) * c).
BOOST_AUTO_TEST_CASE(grad_factor_on_the_device_matches_the_cpu_and_premultiplied_gradients) {
  Generator generator(95);
  const Tensor factor = Tensor::from_floats({1}, {0.2871f});
  const Tensor unscale = Tensor::from_floats({1}, {1.0f / 1536.0f});
  SgdHyper sgd;
  sgd.momentum = 0.9f;
  sgd.nesterov = true;
  sgd.weight_decay = 1e-2f;
  for (const bool unscaled : {false, true}) {
    for (const bool adamw : {false, true}) {
      const std::string what = std::string(adamw ? "adamw" : "sgd") + (unscaled ? " unscaled" : "");
      const Tensor grad_unscale = unscaled ? unscale : Tensor();
      Twin twin = mixed(generator, 1e-2f);
      Twin premultiplied(1e-2f);
      for (const Param& p : twin.cpu)
        premultiplied.add(p.value);
      for (int step = 0; step < 3; ++step) {
        twin.new_gradients(generator, unscaled ? 6144.0f : 4.0f);
        for (std::size_t i = 0; i < twin.cpu.size(); ++i) {
          const Tensor& grad = twin.cpu[i].grad;
          premultiplied.gpu[i].grad =
              to_cuda(multiplied(unscaled ? multiplied(grad, unscale.data<float>()[0]) : grad,
                                 factor.data<float>()[0]));
          premultiplied.cpu[i].grad = twin.cpu[i].grad;  // unused: only its GPU side is compared
        }
        if (adamw) {
          twin.adamw(AdamWHyper{}, {}, factor, grad_unscale);
          adamw_update(Twin::adamw_list(premultiplied.gpu), AdamWHyper{}, premultiplied.gpu_lr,
                       premultiplied.gpu_step);
        } else {
          twin.sgd(sgd, {}, factor, grad_unscale);
          sgd_update(Twin::sgd_list(premultiplied.gpu), sgd, premultiplied.gpu_lr,
                     premultiplied.gpu_step);
        }
        for (std::size_t i = 0; i < twin.gpu.size(); ++i) {
          const std::string where = what + " step " + std::to_string(step) + ", tensor " +
                                    std::to_string(i) + " (" + twin.cpu[i].value.str() + ")";
          check_gpu_equal(twin.gpu[i].value, to_host(premultiplied.gpu[i].value), where);
          check_gpu_equal(twin.gpu[i].state0, to_host(premultiplied.gpu[i].state0), where);
        }
      }
      twin.check(what + " with a factor", adamw);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_list_of_several_launches_advances_the_count_once) {
  // 150 tensors: three launches of at most 64, which all read the count before the last one
  // advances it.
  Generator generator(94);
  Twin twin(1e-3f);
  for (int i = 0; i < 150; ++i)
    twin.add(random_tensor({1 + 37 * i}, kFloatTypes[i % 3], generator));
  for (int step = 1; step <= 3; ++step) {
    twin.new_gradients(generator, 1.0f);
    twin.adamw(AdamWHyper{});
    BOOST_TEST(twin.gpu_count() == step);
  }
  twin.check("adamw over 150 tensors", true);
  twin.new_gradients(generator, 1.0f);
  twin.sgd(SgdHyper{});
  twin.check("sgd over 150 tensors", false);
}

BOOST_AUTO_TEST_SUITE_END()
