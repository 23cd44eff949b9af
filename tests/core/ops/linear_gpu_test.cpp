// The CUDA fully connected layer (cuBLAS GEMMs, bias kernels) against the CPU layer, including
// O1's fp32 weight gradients of half activations.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <utility>

#include "core/ops/linear.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/ops/cuda/linear.h"
#endif

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(linear_gpu)

BOOST_AUTO_TEST_CASE(forward_and_backward_match_the_cpu) {
  Generator generator(61);
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  // Column sums: 64 rows (one row chunk), and 1000 rows in 8 chunks merged by the grid's last
  // block, over 120 columns (a partial tile) or 10 (LeNet's logits).
  struct Case {
    std::int64_t batch, in, out;
  };
  for (const Case& shape : {Case{64, 400, 120}, Case{1000, 128, 10}}) {
    const std::int64_t batch = shape.batch, in = shape.in, out = shape.out;
    for (const DType dtype : types) {
      const double tol = gpu_tolerance(dtype);
      const double atol = (dtype == DType::f32 ? 1e-5 : tol) * std::sqrt(static_cast<double>(in));
      const Tensor x = random_tensor({batch, in}, dtype, generator);
      const Tensor w = random_tensor({out, in}, dtype, generator, -0.1f, 0.1f);
      const Tensor b = random_tensor({out}, dtype, generator);
      const std::string name = std::string(dtype_name(dtype)) + " batch " + std::to_string(batch);
      check_gpu_close(linear_forward(to_cuda(x), to_cuda(w), to_cuda(b)), linear_forward(x, w, b),
                      "linear_forward " + name, tol, atol);
      check_gpu_close(linear_forward(to_cuda(x), to_cuda(w), Tensor()),
                      linear_forward(x, w, Tensor()), "linear_forward without bias " + name, tol,
                      atol);

      const Tensor dy = random_tensor({batch, out}, dtype, generator);
      // Accumulators in the layer's dtype and, for half layers, in f32 (O1).
      for (const DType grad_type : {dtype, DType::f32}) {
        Tensor dw = random_tensor(w.shape(), grad_type, generator);
        Tensor db = random_tensor(b.shape(), grad_type, generator);
        Tensor dw_gpu = to_cuda(dw), db_gpu = to_cuda(db);
        const LinearGrads cpu = linear_backward(x, w, dy, dw, db, true);
        const LinearGrads gpu =
            linear_backward(to_cuda(x), to_cuda(w), to_cuda(dy), dw_gpu, db_gpu, true);
        const std::string what = name + " with " + dtype_name(grad_type) + " accumulators";
        const double grad_atol = (grad_type == DType::f32 ? 1e-5 : tol) * std::sqrt(batch);
        check_gpu_close(dw_gpu, dw, "dw " + what, gpu_tolerance(grad_type), grad_atol);
        check_gpu_close(db_gpu, db, "db " + what, gpu_tolerance(grad_type), grad_atol);
        check_gpu_close(gpu.dx, cpu.dx, "dx " + what, tol, atol);
      }
    }
  }
}

#ifdef ALLOY_HAVE_CUDA
namespace {

// linear_forward of a [256, in] batch through `out` units with a bias, on the GPU against the
// CPU, at every dtype.
void check_biased_forwards(const std::pair<std::int64_t, std::int64_t> (&layers)[2],
                           Generator& generator, const std::string& what) {
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const auto& [in, out] : layers) {
      const Tensor x = random_tensor({256, in}, dtype, generator);
      const Tensor w = random_tensor({out, in}, dtype, generator, -0.1f, 0.1f);
      const Tensor b = random_tensor({out}, dtype, generator);
      const double tol = gpu_tolerance(dtype);
      const double atol = (dtype == DType::f32 ? 1e-5 : tol) * std::sqrt(static_cast<double>(in));
      check_gpu_close(linear_forward(to_cuda(x), to_cuda(w), to_cuda(b)), linear_forward(x, w, b),
                      what + " over " + std::to_string(in) + " inputs, " + dtype_name(dtype), tol,
                      atol);
    }
  }
}

}  // namespace

// Where cuBLAS runs the forward (products core/ops/cuda/small_gemm.h leaves to it: sums over
// more than 512 inputs) and the product has more than 2^15 outputs, the bias rides in the
// cuBLASLt matmul's epilogue (one launch) for every dtype; a shape cuBLASLt cannot fuse would
// still be right, through the two-launch path, but slower, and this test names it.
BOOST_AUTO_TEST_CASE(the_bias_is_added_in_the_gemm_epilogue) {
  Generator generator(62);
  const std::pair<std::int64_t, std::int64_t> layers[] = {{2048, 256}, {2048, 136}};
  check_biased_forwards(layers, generator, "linear_forward with the bias epilogue");
  // Both fuse (a shape with misaligned operands may not: the next test).
  BOOST_TEST(cuda::linear_bias_epilogue_plans(Device::cuda(0), false) == 0,
             "shapes whose bias cuBLASLt could not fuse: " << cuda::linear_bias_epilogue_plans(
                 Device::cuda(0), false));
  BOOST_TEST(cuda::linear_bias_epilogue_plans(Device::cuda(0), true) >= 6);
}

// A product of at most 2^15 outputs over more than 512 inputs (LeNet's first layer: 256 x 128
// over 800) adds its bias apart and leaves the GEMM to cuBLAS, which splits k: no epilogue plan
// is made for it, and the result is the CPU's.
BOOST_AUTO_TEST_CASE(few_outputs_over_many_inputs_add_the_bias_apart) {
  Generator generator(64);
  const std::pair<std::int64_t, std::int64_t> layers[] = {{800, 128}, {2048, 10}};
  const int fused_before = cuda::linear_bias_epilogue_plans(Device::cuda(0), true);
  const int unfused_before = cuda::linear_bias_epilogue_plans(Device::cuda(0), false);
  check_biased_forwards(layers, generator, "linear_forward with its bias added apart");
  BOOST_TEST(cuda::linear_bias_epilogue_plans(Device::cuda(0), true) == fused_before);
  BOOST_TEST(cuda::linear_bias_epilogue_plans(Device::cuda(0), false) == unfused_before);
}

// Operands at addresses aligned to no more than their element: a bias and an input that are
// views one element into larger buffers. cuBLASLt's heuristic is told the bias's address (it
// infers the alignment its kernel may assume from it) and the matrices' alignment; whether it
// then fuses or the two-launch path runs, the result is the CPU's.
BOOST_AUTO_TEST_CASE(misaligned_bias_and_input_give_the_cpus_result) {
  Generator generator(63);
  // A sum too long for small_gemm, and more than 2^15 outputs, so cuBLASLt's epilogue is asked.
  const std::int64_t batch = 64, in = 1200, out = 600;
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const std::size_t element = dtype_size(dtype);
    const Tensor x_buffer = random_tensor({batch * in + 1}, dtype, generator);
    const Tensor b_buffer = random_tensor({out + 1}, dtype, generator);
    const Tensor w = random_tensor({out, in}, dtype, generator, -0.1f, 0.1f);
    const Tensor x = x_buffer.view(element, {batch, in}, dtype);
    const Tensor b = b_buffer.view(element, {out}, dtype);
    const Tensor x_gpu = to_cuda(x_buffer).view(element, {batch, in}, dtype);
    const Tensor b_gpu = to_cuda(b_buffer).view(element, {out}, dtype);
    const double tol = gpu_tolerance(dtype);
    const double atol = (dtype == DType::f32 ? 1e-5 : tol) * std::sqrt(static_cast<double>(in));
    check_gpu_close(linear_forward(x_gpu, to_cuda(w), b_gpu), linear_forward(x, w, b),
                    std::string("linear_forward with misaligned operands ") + dtype_name(dtype),
                    tol, atol);
  }
}
#endif

BOOST_AUTO_TEST_SUITE_END()
