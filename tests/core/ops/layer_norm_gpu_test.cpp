// CUDA layer normalisation against the CPU kernels (forward with and without saved
// statistics, backward with dy of x's dtype or f32, f32 or x-typed parameters), and the same
// bits on a second run.
#include <boost/test/unit_test.hpp>

#include "core/ops/layer_norm.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(layer_norm_gpu)

BOOST_AUTO_TEST_CASE(forward_and_backward_match_the_cpu_and_repeat_bit_for_bit) {
  Generator generator(91);
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  // A short row (one warp, most threads idle), rows longer than a block (300 > 256 threads)
  // in a 3-d input, and 300 rows: three row chunks whose parameter sums the last block joins.
  const Shape shapes[] = {{6, 13}, {2, 3, 300}, {300, 40}};
  const float eps = 1e-5f;
  for (const DType dtype : types) {
    for (const DType param_type : {DType::f32, dtype}) {
      for (const Shape& shape : shapes) {
        const std::int64_t features = shape.back();
        const DType dy_type = shape.size() == 3 ? DType::f32 : dtype;
        const std::string what = std::string(dtype_name(dtype)) + " x " + shape_str(shape) +
                                 " with " + dtype_name(param_type) + " parameters, dy " +
                                 dtype_name(dy_type);
        const Tensor x = random_tensor(shape, dtype, generator, -2.0f, 3.0f);
        const Tensor weight = random_tensor({features}, param_type, generator, 0.5f, 1.5f);
        const Tensor bias = random_tensor({features}, param_type, generator);
        const Tensor dy = random_tensor(shape, dy_type, generator);
        const Tensor dweight0 = random_tensor({features}, param_type, generator);
        const Tensor dbias0 = random_tensor({features}, param_type, generator);
        const Tensor x_gpu = to_cuda(x), weight_gpu = to_cuda(weight), bias_gpu = to_cuda(bias);
        const Tensor dy_gpu = to_cuda(dy);

        const LayerNormResult cpu = layer_norm_forward(x, weight, bias, eps);
        Tensor dweight = dweight0.clone(), dbias = dbias0.clone();
        const Tensor dx = layer_norm_backward(dy, x, weight, cpu.saved, dweight, dbias);

        LayerNormResult gpu[2];
        Tensor dx_gpu[2], dweight_gpu[2], dbias_gpu[2];
        for (int run = 0; run < 2; ++run) {
          gpu[run] = layer_norm_forward(x_gpu, weight_gpu, bias_gpu, eps);
          dweight_gpu[run] = to_cuda(dweight0);
          dbias_gpu[run] = to_cuda(dbias0);
          dx_gpu[run] = layer_norm_backward(dy_gpu, x_gpu, weight_gpu, gpu[run].saved,
                                            dweight_gpu[run], dbias_gpu[run]);
        }
        check_gpu_close(gpu[0].y, cpu.y, "y " + what, gpu_tolerance(dtype), 1e-5);
        check_gpu_close(gpu[0].saved.mean, cpu.saved.mean, "mean " + what, 1e-5, 1e-6);
        check_gpu_close(gpu[0].saved.rstd, cpu.saved.rstd, "rstd " + what, 1e-5, 0.0);
        BOOST_TEST((dx_gpu[0].dtype() == dy_type));
        // dx cancels (g - mean terms), so a difference in the last bits of the row sums shows
        // relative to the terms (of order rstd), not to dx.
        check_gpu_close(dx_gpu[0], dx, "dx " + what, gpu_tolerance(dy_type), 1e-5);
        check_gpu_close(dweight_gpu[0], dweight, "dweight " + what, gpu_tolerance(param_type),
                        1e-5);
        check_gpu_close(dbias_gpu[0], dbias, "dbias " + what, gpu_tolerance(param_type), 1e-5);

        check_gpu_equal(gpu[1].y, to_host(gpu[0].y), "y again " + what);
        check_gpu_equal(gpu[1].saved.mean, to_host(gpu[0].saved.mean), "mean again " + what);
        check_gpu_equal(gpu[1].saved.rstd, to_host(gpu[0].saved.rstd), "rstd again " + what);
        check_gpu_equal(dx_gpu[1], to_host(dx_gpu[0]), "dx again " + what);
        check_gpu_equal(dweight_gpu[1], to_host(dweight_gpu[0]), "dweight again " + what);
        check_gpu_equal(dbias_gpu[1], to_host(dbias_gpu[0]), "dbias again " + what);

        // An evaluation forward saves nothing and computes the same output.
        const LayerNormResult eval = layer_norm_forward(x_gpu, weight_gpu, bias_gpu, eps, false);
        BOOST_TEST(!eval.saved.mean.defined());
        check_gpu_equal(eval.y, to_host(gpu[0].y), "eval y " + what);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
