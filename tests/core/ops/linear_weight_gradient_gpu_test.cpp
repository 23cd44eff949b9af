// Alloy's kernel for small linear layers' weight gradients (core/ops/cuda/
// linear_weight_gradient.h) against the CPU's dw += dy^T x: every dtype, fp32 and same-dtype
// gradients, shapes that end inside a 32x32 tile and a 32-row batch chunk, reruns bit-identical,
// and the sizes it takes.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>

#include "core/ops/linear.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/linear_weight_gradient.h"
#endif

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(linear_weight_gradient_gpu)

#ifdef ALLOY_HAVE_CUDA
namespace {

cudaStream_t stream() {
  return cuda::context(Device::cuda(0)).stream.get();
}

// dw + dy^T x on the GPU by the kernel alone.
Tensor gpu_weight_gradient(const Tensor& dy, const Tensor& x, const Tensor& dw) {
  Tensor out = to_cuda(dw);
  cuda::linear_weight_gradient(static_cast<int>(x.shape()[0]), static_cast<int>(x.shape()[1]),
                               static_cast<int>(dy.shape()[1]), to_cuda(dy).raw(), to_cuda(x).raw(),
                               x.dtype(), out.raw(), dw.dtype(), stream());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(adds_dy_transposed_times_x_as_the_cpu_does_and_repeats_bit_for_bit) {
  Generator generator(131);
  struct Case {
    std::int64_t batch, in, out;
  };
  // LeNet's two layers at batch 256; partial tiles and a partial last chunk; one row.
  for (const Case c : {Case{256, 800, 128}, Case{256, 128, 10}, Case{37, 45, 33}, Case{1, 3, 2}}) {
    for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      for (const DType grad_type : {DType::f32, dtype}) {
        const std::string what = std::string(dtype_name(dtype)) + " into " + dtype_name(grad_type) +
                                 ", batch " + std::to_string(c.batch) + ", " +
                                 std::to_string(c.out) + "x" + std::to_string(c.in);
        const Tensor x = random_tensor({c.batch, c.in}, dtype, generator);
        const Tensor w = random_tensor({c.out, c.in}, dtype, generator);
        const Tensor dy = random_tensor({c.batch, c.out}, dtype, generator);
        const Tensor dw = random_tensor({c.out, c.in}, grad_type, generator);
        Tensor expected = dw.clone();
        Tensor db;
        linear_backward(x, w, dy, expected, db, false);
        const Tensor gpu = gpu_weight_gradient(dy, x, dw);
        const double atol =
            (grad_type == DType::f32 ? 1e-5 : gpu_tolerance(grad_type)) * std::sqrt(c.batch);
        check_gpu_close(gpu, expected, what, gpu_tolerance(grad_type), atol);
        check_gpu_equal(gpu_weight_gradient(dy, x, dw), to_host(gpu), what + ", run twice");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(takes_layers_of_up_to_2_to_the_18_weights) {
  BOOST_TEST(cuda::linear_weight_gradient_fits(800, 128));
  BOOST_TEST(cuda::linear_weight_gradient_fits(512, 512));
  BOOST_TEST(!cuda::linear_weight_gradient_fits(513, 512));
  BOOST_TEST(!cuda::linear_weight_gradient_fits(1024, 4096));
  BOOST_TEST(!cuda::linear_weight_gradient_fits(0, 10));
  const Tensor dw = Tensor::zeros({2, 2}, DType::bf16, Device::cuda(0));
  BOOST_CHECK_EXCEPTION(
      cuda::linear_weight_gradient(1, 2, 2, dw.raw(), dw.raw(), DType::f16,
                                   const_cast<void*>(dw.raw()), DType::bf16, stream()),
      Error, [](const Error& error) {
        return std::string(error.what()).find("bf16 gradient of f16") != std::string::npos;
      });
}
#else
BOOST_AUTO_TEST_CASE(needs_the_cuda_backend) {}  // never reached: the fixture skips first
#endif

BOOST_AUTO_TEST_SUITE_END()
