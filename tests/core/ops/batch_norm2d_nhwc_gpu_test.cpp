// The CUDA channels-last batch norm (its own NHWC kernels) against the CPU's NHWC op (the NCHW
// kernels on the permuted tensor, batch_norm2d_nhwc_test): training forward with its saved and
// running statistics, evaluation forward and backward, in every dtype, with f32 or x-typed
// parameters, the fused ReLU and its mask, gradients accumulating onto earlier values, and
// shapes that reach each path of the kernels (vector widths, chunk merges, channel tiles).
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "core/ops/batch_norm2d.h"
#include "core/ops/elementwise.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

namespace {

struct Inputs {
  Tensor x, weight, bias, mean_cpu, var_cpu;
  Tensor x_gpu, weight_gpu, bias_gpu, mean_gpu, var_gpu;
};

// Random NHWC x ([N, H, W, C]), parameters and running statistics, with device copies.
Inputs random_inputs(const Shape& shape, DType dtype, DType param_type, Generator& generator) {
  const std::int64_t channels = shape[3];
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

BatchNormParams nhwc_params(bool relu) {
  BatchNormParams params;
  params.relu = relu;
  params.layout = Layout::nhwc;
  return params;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(batch_norm2d_nhwc_gpu)

BOOST_AUTO_TEST_CASE(train_eval_and_backward_match_the_cpu) {
  Generator generator(93);
  // NHWC shapes. C = 3: one value at a time, 715 rows in three chunks merged by the merge
  // launch. C = 8: one vector per row (8 halves or two of 4 floats), 105 rows in one chunk,
  // finished by the reduction itself. C = 64: 324 rows in three (halves) or six (f32) chunks,
  // each channel's in as many runs. C = 264: rows of three (f32) or two (halves) channel tiles.
  const Shape shapes[] = {{5, 13, 11, 3}, {3, 7, 5, 8}, {4, 9, 9, 64}, {3, 3, 5, 264}};
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const DType param_type : {DType::f32, dtype}) {
      for (const Shape& shape : shapes) {
        for (const bool relu : {false, true}) {
          const std::int64_t channels = shape[3];
          const double tol = gpu_tolerance(dtype);
          const std::string what = std::string(dtype_name(dtype)) + " x " + shape_str(shape) +
                                   " with " + dtype_name(param_type) + " parameters" +
                                   (relu ? ", relu" : "");
          auto in = random_inputs(shape, dtype, param_type, generator);
          const BatchNormParams params = nhwc_params(relu);
          const BatchNormTrainResult cpu =
              batch_norm2d_train_forward(in.x, in.weight, in.bias, in.mean_cpu, in.var_cpu, params);
          const BatchNormTrainResult gpu = batch_norm2d_train_forward(
              in.x_gpu, in.weight_gpu, in.bias_gpu, in.mean_gpu, in.var_gpu, params);
          BOOST_TEST(layout_name(gpu.saved.layout) == std::string("nhwc"), what);
          check_gpu_close(gpu.y, cpu.y, "train y " + what, tol, 1e-4);
          check_gpu_close(gpu.saved.mean, cpu.saved.mean, "saved mean " + what, 1e-4, 1e-5);
          check_gpu_close(gpu.saved.invstd, cpu.saved.invstd, "saved invstd " + what, 1e-4, 0.0);
          check_gpu_close(in.mean_gpu, in.mean_cpu, "running mean " + what,
                          gpu_tolerance(param_type), 1e-5);
          check_gpu_close(in.var_gpu, in.var_cpu, "running var " + what, gpu_tolerance(param_type),
                          1e-5);
          check_gpu_close(
              batch_norm2d_eval_forward(in.x_gpu, in.weight_gpu, in.bias_gpu, in.mean_gpu,
                                        in.var_gpu, params),
              batch_norm2d_eval_forward(in.x, in.weight, in.bias, in.mean_cpu, in.var_cpu, params),
              "eval y " + what, tol, 1e-4);

          // dy in f32 or x's dtype; with relu, the CPU's y masks both sides (an f32 copy for
          // bf16 x: a mask of another dtype). dweight and dbias accumulate onto random values.
          const DType dy_type = dtype == DType::f16 ? DType::f32 : dtype;
          const Tensor dy = random_tensor(shape, dy_type, generator);
          const Tensor mask = !relu                  ? Tensor()
                              : dtype == DType::bf16 ? cast(cpu.y, DType::f32)
                                                     : cpu.y;
          Tensor dweight = random_tensor({channels}, param_type, generator);
          Tensor dbias = random_tensor({channels}, param_type, generator);
          Tensor dweight_gpu = to_cuda(dweight), dbias_gpu = to_cuda(dbias);
          const Tensor dx =
              batch_norm2d_backward(in.x, in.weight, dy, cpu.saved, dweight, dbias, mask);
          const Tensor dx_gpu =
              batch_norm2d_backward(in.x_gpu, in.weight_gpu, to_cuda(dy), gpu.saved, dweight_gpu,
                                    dbias_gpu, relu ? to_cuda(mask) : Tensor());
          check_gpu_close(dx_gpu, dx, "dx " + what, tol, 1e-3);
          check_gpu_close(dweight_gpu, dweight, "dweight " + what, gpu_tolerance(param_type), 1e-3);
          check_gpu_close(dbias_gpu, dbias, "dbias " + what, gpu_tolerance(param_type), 1e-3);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(many_chunks_and_many_channels_merge_like_the_cpu) {
  // 2000 rows of 64 channels: 32 chunks (f32) or 16 (halves), each channel's merged in as many
  // runs by 8 merge blocks; 150 rows of 600 channels: 75 merge blocks, and rows of several
  // channel tiles.
  Generator generator(96);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const Shape& shape : {Shape{1, 40, 50, 64}, Shape{2, 5, 15, 600}}) {
      const std::int64_t channels = shape[3];
      const double tol = gpu_tolerance(dtype);
      const std::string what = std::string(dtype_name(dtype)) + " x " + shape_str(shape);
      auto in = random_inputs(shape, dtype, DType::f32, generator);
      const BatchNormParams params = nhwc_params(true);
      const BatchNormTrainResult cpu =
          batch_norm2d_train_forward(in.x, in.weight, in.bias, in.mean_cpu, in.var_cpu, params);
      const BatchNormTrainResult gpu = batch_norm2d_train_forward(
          in.x_gpu, in.weight_gpu, in.bias_gpu, in.mean_gpu, in.var_gpu, params);
      check_gpu_close(gpu.y, cpu.y, "train y " + what, tol, 1e-4);
      check_gpu_close(gpu.saved.mean, cpu.saved.mean, "saved mean " + what, 1e-4, 1e-5);
      check_gpu_close(gpu.saved.invstd, cpu.saved.invstd, "saved invstd " + what, 1e-4, 0.0);
      check_gpu_close(in.var_gpu, in.var_cpu, "running var " + what, gpu_tolerance(DType::f32),
                      1e-5);
      const Tensor dy = random_tensor(shape, dtype, generator);
      Tensor dweight = Tensor::zeros({channels}, DType::f32);
      Tensor dbias = Tensor::zeros({channels}, DType::f32);
      Tensor dweight_gpu = to_cuda(dweight), dbias_gpu = to_cuda(dbias);
      const Tensor dx =
          batch_norm2d_backward(in.x, in.weight, dy, cpu.saved, dweight, dbias, cpu.y);
      const Tensor dx_gpu = batch_norm2d_backward(in.x_gpu, in.weight_gpu, to_cuda(dy), gpu.saved,
                                                  dweight_gpu, dbias_gpu, to_cuda(cpu.y));
      check_gpu_close(dx_gpu, dx, "dx " + what, tol, 1e-3);
      check_gpu_close(dweight_gpu, dweight, "dweight " + what, gpu_tolerance(DType::f32), 1e-3);
      check_gpu_close(dbias_gpu, dbias, "dbias " + what, gpu_tolerance(DType::f32), 1e-3);
    }
  }
}

BOOST_AUTO_TEST_CASE(results_are_deterministic_and_the_running_update_optional) {
  // Chunks merged by the merge launch (three for C = 3): the same bits on a second run of
  // each kernel; without the running update the same y and saved statistics, running
  // statistics untouched.
  Generator generator(94);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const Shape& shape : {Shape{5, 13, 11, 3}, Shape{4, 9, 9, 64}}) {
      const std::string what = std::string(dtype_name(dtype)) + " x " + shape_str(shape);
      auto in = random_inputs(shape, dtype, DType::f32, generator);
      BatchNormParams params = nhwc_params(true);
      Tensor updated_mean = to_cuda(in.mean_cpu), updated_var = to_cuda(in.var_cpu);
      const BatchNormTrainResult first = batch_norm2d_train_forward(
          in.x_gpu, in.weight_gpu, in.bias_gpu, updated_mean, updated_var, params);
      params.update_running_statistics = false;
      const BatchNormTrainResult second = batch_norm2d_train_forward(
          in.x_gpu, in.weight_gpu, in.bias_gpu, in.mean_gpu, in.var_gpu, params);
      check_gpu_equal(second.y, to_host(first.y), "y again " + what);
      check_gpu_equal(second.saved.mean, to_host(first.saved.mean), "saved mean again " + what);
      check_gpu_equal(second.saved.invstd, to_host(first.saved.invstd),
                      "saved invstd again " + what);
      check_gpu_equal(in.mean_gpu, in.mean_cpu, "running mean kept " + what);
      check_gpu_equal(in.var_gpu, in.var_cpu, "running var kept " + what);
      BOOST_TEST(to_host(updated_mean).to_floats() != in.mean_cpu.to_floats(), what);

      const Tensor dy = to_cuda(random_tensor(shape, dtype, generator));
      Tensor dweight[2], dbias[2], dx[2];
      for (int run = 0; run < 2; ++run) {
        dweight[run] = Tensor::zeros({shape[3]}, DType::f32, in.x_gpu.device());
        dbias[run] = Tensor::zeros({shape[3]}, DType::f32, in.x_gpu.device());
        dx[run] = batch_norm2d_backward(in.x_gpu, in.weight_gpu, dy, first.saved, dweight[run],
                                        dbias[run], first.y);
      }
      check_gpu_equal(dx[1], to_host(dx[0]), "dx again " + what);
      check_gpu_equal(dweight[1], to_host(dweight[0]), "dweight again " + what);
      check_gpu_equal(dbias[1], to_host(dbias[0]), "dbias again " + what);
    }
  }
}

BOOST_AUTO_TEST_CASE(many_chunks_and_wide_rows_are_deterministic_and_match_the_cpu) {
  // 25088 rows of 64 channels: hundreds of chunks (392 in f32, 196 in halves) whose merge cuts
  // each channel's chunks into 32 runs of several chunks; resnet18's layer4 shape with fewer
  // images, 256 rows of 512 channels: few rows in several chunks of two or four channel tiles.
  // A second run of each kernel gives the same bits, and both the CPU's results.
  Generator generator(97);
  for (const DType dtype : {DType::f32, DType::f16}) {
    for (const Shape& shape : {Shape{8, 56, 56, 64}, Shape{16, 4, 4, 512}}) {
      const std::int64_t channels = shape[3];
      const double tol = gpu_tolerance(dtype);
      const std::string what = std::string(dtype_name(dtype)) + " x " + shape_str(shape);
      auto in = random_inputs(shape, dtype, DType::f32, generator);
      const BatchNormParams params = nhwc_params(true);
      const BatchNormTrainResult cpu =
          batch_norm2d_train_forward(in.x, in.weight, in.bias, in.mean_cpu, in.var_cpu, params);
      BatchNormTrainResult gpu[2];
      for (int run = 0; run < 2; ++run) {
        Tensor mean = to_cuda(in.mean_cpu), var = to_cuda(in.var_cpu);
        gpu[run] =
            batch_norm2d_train_forward(in.x_gpu, in.weight_gpu, in.bias_gpu, mean, var, params);
      }
      check_gpu_close(gpu[0].y, cpu.y, "train y " + what, tol, 1e-4);
      check_gpu_close(gpu[0].saved.mean, cpu.saved.mean, "saved mean " + what, 1e-4, 1e-5);
      check_gpu_close(gpu[0].saved.invstd, cpu.saved.invstd, "saved invstd " + what, 1e-4, 0.0);
      check_gpu_equal(gpu[1].saved.mean, to_host(gpu[0].saved.mean), "saved mean again " + what);
      check_gpu_equal(gpu[1].saved.invstd, to_host(gpu[0].saved.invstd),
                      "saved invstd again " + what);
      check_gpu_equal(gpu[1].y, to_host(gpu[0].y), "y again " + what);

      const Tensor dy = random_tensor(shape, dtype, generator);
      const Tensor dy_gpu = to_cuda(dy);
      Tensor dweight = Tensor::zeros({channels}, DType::f32);
      Tensor dbias = Tensor::zeros({channels}, DType::f32);
      const Tensor dx =
          batch_norm2d_backward(in.x, in.weight, dy, cpu.saved, dweight, dbias, cpu.y);
      Tensor dweight_gpu[2], dbias_gpu[2], dx_gpu[2];
      for (int run = 0; run < 2; ++run) {
        dweight_gpu[run] = Tensor::zeros({channels}, DType::f32, in.x_gpu.device());
        dbias_gpu[run] = Tensor::zeros({channels}, DType::f32, in.x_gpu.device());
        dx_gpu[run] = batch_norm2d_backward(in.x_gpu, in.weight_gpu, dy_gpu, gpu[0].saved,
                                            dweight_gpu[run], dbias_gpu[run], gpu[0].y);
      }
      check_gpu_close(dx_gpu[0], dx, "dx " + what, tol, 1e-3);
      check_gpu_close(dweight_gpu[0], dweight, "dweight " + what, gpu_tolerance(DType::f32), 1e-3);
      check_gpu_close(dbias_gpu[0], dbias, "dbias " + what, gpu_tolerance(DType::f32), 1e-3);
      check_gpu_equal(dx_gpu[1], to_host(dx_gpu[0]), "dx again " + what);
      check_gpu_equal(dweight_gpu[1], to_host(dweight_gpu[0]), "dweight again " + what);
      check_gpu_equal(dbias_gpu[1], to_host(dbias_gpu[0]), "dbias again " + what);
    }
  }
}

// x, dy and the mask one element into larger buffers with C = 8: vectors would be misaligned,
// so the kernels read one value at a time; still the CPU's results.
BOOST_AUTO_TEST_CASE(misaligned_operands_give_the_cpus_result) {
  Generator generator(95);
  const Shape shape{4, 5, 5, 8};
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
    const Tensor weight = random_tensor({shape[3]}, DType::f32, generator, 0.5f, 1.5f);
    const Tensor bias = random_tensor({shape[3]}, DType::f32, generator);
    Tensor mean_cpu = random_tensor({shape[3]}, DType::f32, generator);
    Tensor var_cpu = random_tensor({shape[3]}, DType::f32, generator, 0.5f, 2.0f);
    Tensor mean_gpu = to_cuda(mean_cpu), var_gpu = to_cuda(var_cpu);
    const BatchNormParams params = nhwc_params(true);
    const BatchNormTrainResult cpu =
        batch_norm2d_train_forward(x, weight, bias, mean_cpu, var_cpu, params);
    const BatchNormTrainResult gpu = batch_norm2d_train_forward(
        x_gpu, to_cuda(weight), to_cuda(bias), mean_gpu, var_gpu, params);
    check_gpu_close(gpu.y, cpu.y, "train y " + what, tol, 1e-4);
    check_gpu_close(gpu.saved.mean, cpu.saved.mean, "saved mean " + what, 1e-4, 1e-5);
    check_gpu_close(gpu.saved.invstd, cpu.saved.invstd, "saved invstd " + what, 1e-4, 0.0);

    std::vector<float> mask_values = cpu.y.to_floats();
    mask_values.insert(mask_values.begin(), 0.0f);
    const Tensor mask_buffer = Tensor::from_floats({count + 1}, mask_values, dtype);
    const Tensor mask = mask_buffer.view(element, shape, dtype);
    const Tensor mask_gpu = to_cuda(mask_buffer).view(element, shape, dtype);
    Tensor dweight = Tensor::zeros({shape[3]}, DType::f32);
    Tensor dbias = Tensor::zeros({shape[3]}, DType::f32);
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
