// CUDA batch-norm against the CPU kernels: training forward (output, saved statistics, running
// statistics), evaluation forward and backward, with f32 or x-typed parameters, plain and with
// the fused ReLU (forward relu, backward masked by a ReLU output).
#include <boost/test/unit_test.hpp>

#include <vector>

#include "core/ops/batch_norm2d.h"
#include "core/ops/elementwise.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

namespace {

// Random host x, weight, bias and running statistics (drawn in this order) and device copies;
// each side has running statistics of its own to update.
struct Inputs {
  Tensor x, weight, bias, mean_cpu, var_cpu;
  Tensor x_gpu, weight_gpu, bias_gpu, mean_gpu, var_gpu;
};
Inputs random_inputs(const Shape& shape, DType dtype, DType param_type, Generator& generator) {
  const std::int64_t channels = shape[1];
  Inputs in;
  in.x = random_tensor(shape, dtype, generator, -2.0f, 3.0f);
  in.weight = random_tensor({channels}, param_type, generator, 0.5f, 1.5f);
  in.bias = random_tensor({channels}, param_type, generator);
  in.mean_cpu = random_tensor({channels}, param_type, generator);
  in.var_cpu = random_tensor({channels}, param_type, generator, 0.5f, 2.0f);
  in.x_gpu = to_cuda(in.x);
  in.weight_gpu = to_cuda(in.weight);
  in.bias_gpu = to_cuda(in.bias);
  in.mean_gpu = to_cuda(in.mean_cpu);
  in.var_gpu = to_cuda(in.var_cpu);
  return in;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(batch_norm2d_gpu)

BOOST_AUTO_TEST_CASE(train_eval_and_backward_match_the_cpu) {
  Generator generator(81);
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  const BatchNormParams params{0.1f, 1e-5f};
  // One block per channel (16 x 9 x 7 values), a small plane over a large batch (256 x 7 x 7:
  // 4 chunks per channel) and a large plane (64 x 28 x 28: 13 chunks) whose chunks the grid's
  // last block merges. The planes of 63 and 49 values are read one value at a time, 28 x 28
  // eight halves or four floats at a time, and 10 x 10 (3 chunks) four values at a time.
  const Shape shapes[] = {{16, 12, 9, 7}, {256, 6, 7, 7}, {64, 3, 28, 28}, {96, 3, 10, 10}};
  for (const DType dtype : types) {
    for (const DType param_type : {DType::f32, dtype}) {
      for (const Shape& shape : shapes) {
        const std::int64_t channels = shape[1];
        const double tol = gpu_tolerance(dtype);
        const std::string what = std::string(dtype_name(dtype)) + " x " + shape_str(shape) +
                                 " with " + dtype_name(param_type) + " parameters";
        auto [x, weight, bias, mean_cpu, var_cpu, x_gpu, weight_gpu, bias_gpu, mean_gpu, var_gpu] =
            random_inputs(shape, dtype, param_type, generator);

        const BatchNormTrainResult cpu =
            batch_norm2d_train_forward(x, weight, bias, mean_cpu, var_cpu, params);
        const BatchNormTrainResult gpu =
            batch_norm2d_train_forward(x_gpu, weight_gpu, bias_gpu, mean_gpu, var_gpu, params);
        check_gpu_close(gpu.y, cpu.y, "train y " + what, tol, 1e-4);
        check_gpu_close(gpu.saved.mean, cpu.saved.mean, "saved mean " + what, 1e-4, 1e-5);
        check_gpu_close(gpu.saved.invstd, cpu.saved.invstd, "saved invstd " + what, 1e-4, 0.0);
        {  // the chunks merge in a fixed order: the same bits again
          Tensor mean_again = to_cuda(mean_cpu), var_again = to_cuda(var_cpu);
          const BatchNormTrainResult again = batch_norm2d_train_forward(
              x_gpu, weight_gpu, bias_gpu, mean_again, var_again, params);
          check_gpu_equal(again.saved.mean, to_host(gpu.saved.mean), "saved mean again " + what);
          check_gpu_equal(again.saved.invstd, to_host(gpu.saved.invstd),
                          "saved invstd again " + what);
        }
        check_gpu_close(mean_gpu, mean_cpu, "running mean " + what, gpu_tolerance(param_type),
                        1e-5);
        check_gpu_close(var_gpu, var_cpu, "running var " + what, gpu_tolerance(param_type), 1e-5);

        check_gpu_close(
            batch_norm2d_eval_forward(x_gpu, weight_gpu, bias_gpu, mean_gpu, var_gpu, params),
            batch_norm2d_eval_forward(x, weight, bias, mean_cpu, var_cpu, params), "eval y " + what,
            tol, 1e-4);

        const Tensor dy = random_tensor(x.shape(), dtype, generator);
        Tensor dweight = random_tensor({channels}, param_type, generator);
        Tensor dbias = random_tensor({channels}, param_type, generator);
        Tensor dweight_gpu = to_cuda(dweight), dbias_gpu = to_cuda(dbias);
        const Tensor dx = batch_norm2d_backward(x, weight, dy, cpu.saved, dweight, dbias);
        const Tensor dx_gpu = batch_norm2d_backward(x_gpu, weight_gpu, to_cuda(dy), gpu.saved,
                                                    dweight_gpu, dbias_gpu);
        check_gpu_close(dx_gpu, dx, "dx " + what, tol, 1e-3);
        check_gpu_close(dweight_gpu, dweight, "dweight " + what, gpu_tolerance(param_type), 1e-3);
        check_gpu_close(dbias_gpu, dbias, "dbias " + what, gpu_tolerance(param_type), 1e-3);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_forward_without_the_running_update_changes_only_that) {
  // A recomputed block's second forward: the output and saved statistics of the updating
  // forward, bit for bit, and the running statistics left as they were.
  Generator generator(83);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const std::string what = std::string(dtype_name(dtype)) + " x";
    auto in = random_inputs({64, 3, 28, 28}, dtype, DType::f32, generator);
    BatchNormParams params;
    params.relu = true;
    Tensor updated_mean = to_cuda(in.mean_cpu), updated_var = to_cuda(in.var_cpu);
    const BatchNormTrainResult updating = batch_norm2d_train_forward(
        in.x_gpu, in.weight_gpu, in.bias_gpu, updated_mean, updated_var, params);
    params.update_running_statistics = false;
    const BatchNormTrainResult kept = batch_norm2d_train_forward(
        in.x_gpu, in.weight_gpu, in.bias_gpu, in.mean_gpu, in.var_gpu, params);
    check_gpu_equal(kept.y, to_host(updating.y), "y " + what);
    check_gpu_equal(kept.saved.mean, to_host(updating.saved.mean), "saved mean " + what);
    check_gpu_equal(kept.saved.invstd, to_host(updating.saved.invstd), "saved invstd " + what);
    check_gpu_equal(in.mean_gpu, in.mean_cpu, "running mean kept " + what);
    check_gpu_equal(in.var_gpu, in.var_cpu, "running var kept " + what);
    BOOST_TEST(to_host(updated_mean).to_floats() != in.mean_cpu.to_floats(), what);
  }
}

BOOST_AUTO_TEST_CASE(fused_relu_matches_the_cpu) {
  Generator generator(82);
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  BatchNormParams params;
  params.relu = true;
  // One chunk per channel, and 13 chunks merged by the grid's last block.
  const Shape shapes[] = {{16, 12, 9, 7}, {64, 3, 28, 28}};
  for (const DType dtype : types) {
    for (const Shape& shape : shapes) {
      const std::int64_t channels = shape[1];
      const double tol = gpu_tolerance(dtype);
      const std::string what = std::string(dtype_name(dtype)) + " x " + shape_str(shape);
      auto [x, weight, bias, mean_cpu, var_cpu, x_gpu, weight_gpu, bias_gpu, mean_gpu, var_gpu] =
          random_inputs(shape, dtype, DType::f32, generator);

      const BatchNormTrainResult cpu =
          batch_norm2d_train_forward(x, weight, bias, mean_cpu, var_cpu, params);
      const BatchNormTrainResult gpu =
          batch_norm2d_train_forward(x_gpu, weight_gpu, bias_gpu, mean_gpu, var_gpu, params);
      check_gpu_close(gpu.y, cpu.y, "relu train y " + what, tol, 1e-4);
      check_gpu_close(
          batch_norm2d_eval_forward(x_gpu, weight_gpu, bias_gpu, mean_gpu, var_gpu, params),
          batch_norm2d_eval_forward(x, weight, bias, mean_cpu, var_cpu, params),
          "relu eval y " + what, tol, 1e-4);

      // The mask is the CPU's output on both sides, so both mask the same elements; an f32
      // mask stands for a promoted residual sum.
      for (const DType mask_type : {dtype, DType::f32}) {
        const Tensor mask = mask_type == dtype ? cpu.y : cast(cpu.y, mask_type);
        const Tensor dy = random_tensor(x.shape(), dtype, generator);
        Tensor dweight = Tensor::zeros({channels}, DType::f32);
        Tensor dbias = Tensor::zeros({channels}, DType::f32);
        Tensor dweight_gpu = to_cuda(dweight), dbias_gpu = to_cuda(dbias);
        const std::string grads = what + " mask " + dtype_name(mask_type);
        const Tensor dx = batch_norm2d_backward(x, weight, dy, cpu.saved, dweight, dbias, mask);
        const Tensor dx_gpu = batch_norm2d_backward(x_gpu, weight_gpu, to_cuda(dy), gpu.saved,
                                                    dweight_gpu, dbias_gpu, to_cuda(mask));
        check_gpu_close(dx_gpu, dx, "relu dx " + grads, tol, 1e-3);
        check_gpu_close(dweight_gpu, dweight, "relu dweight " + grads, gpu_tolerance(DType::f32),
                        1e-3);
        check_gpu_close(dbias_gpu, dbias, "relu dbias " + grads, gpu_tolerance(DType::f32), 1e-3);
      }
    }
  }
}

// x, dy and the relu mask as views one element into larger buffers: an 8x8 plane whose vectors
// of 8 halves or 4 floats would be misaligned, so the kernels read one value at a time; the
// results are still the CPU's.
BOOST_AUTO_TEST_CASE(misaligned_operands_give_the_cpus_result) {
  Generator generator(84);
  const Shape shape{32, 2, 8, 8};
  const std::int64_t count = shape_numel(shape);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const std::string what = std::string(dtype_name(dtype)) + " misaligned x, dy and mask";
    const std::size_t element = dtype_size(dtype);
    const double tol = gpu_tolerance(dtype);
    const Tensor x_buffer = random_tensor({count + 1}, dtype, generator, -2.0f, 3.0f);
    const Tensor dy_buffer = random_tensor({count + 1}, dtype, generator);
    const Tensor x = x_buffer.view(element, shape, dtype);
    const Tensor dy = dy_buffer.view(element, shape, dtype);
    const Tensor x_gpu = to_cuda(x_buffer).view(element, shape, dtype);
    const Tensor dy_gpu = to_cuda(dy_buffer).view(element, shape, dtype);
    const Tensor weight = random_tensor({shape[1]}, DType::f32, generator, 0.5f, 1.5f);
    const Tensor bias = random_tensor({shape[1]}, DType::f32, generator);
    Tensor mean_cpu = random_tensor({shape[1]}, DType::f32, generator);
    Tensor var_cpu = random_tensor({shape[1]}, DType::f32, generator, 0.5f, 2.0f);
    Tensor mean_gpu = to_cuda(mean_cpu), var_gpu = to_cuda(var_cpu);
    BatchNormParams params;
    params.relu = true;
    const BatchNormTrainResult cpu =
        batch_norm2d_train_forward(x, weight, bias, mean_cpu, var_cpu, params);
    const BatchNormTrainResult gpu = batch_norm2d_train_forward(
        x_gpu, to_cuda(weight), to_cuda(bias), mean_gpu, var_gpu, params);
    check_gpu_close(gpu.y, cpu.y, "train y " + what, tol, 1e-4);
    check_gpu_close(gpu.saved.mean, cpu.saved.mean, "saved mean " + what, 1e-4, 1e-5);
    check_gpu_close(gpu.saved.invstd, cpu.saved.invstd, "saved invstd " + what, 1e-4, 0.0);

    // The mask: the CPU's output (exact in its dtype), one element into a buffer of its own.
    std::vector<float> mask_values = cpu.y.to_floats();
    mask_values.insert(mask_values.begin(), 0.0f);
    const Tensor mask_buffer = Tensor::from_floats({count + 1}, mask_values, dtype);
    const Tensor mask = mask_buffer.view(element, shape, dtype);
    const Tensor mask_gpu = to_cuda(mask_buffer).view(element, shape, dtype);
    Tensor dweight = Tensor::zeros({shape[1]}, DType::f32);
    Tensor dbias = Tensor::zeros({shape[1]}, DType::f32);
    Tensor dweight_gpu = to_cuda(dweight), dbias_gpu = to_cuda(dbias);
    const Tensor dx = batch_norm2d_backward(x, weight, dy, cpu.saved, dweight, dbias, mask);
    const Tensor dx_gpu = batch_norm2d_backward(x_gpu, to_cuda(weight), dy_gpu, gpu.saved,
                                                dweight_gpu, dbias_gpu, mask_gpu);
    check_gpu_close(dx_gpu, dx, "dx " + what, tol, 1e-3);
    check_gpu_close(dweight_gpu, dweight, "dweight " + what, gpu_tolerance(DType::f32), 1e-3);
    check_gpu_close(dbias_gpu, dbias, "dbias " + what, gpu_tolerance(DType::f32), 1e-3);
  }
}

BOOST_AUTO_TEST_SUITE_END()
