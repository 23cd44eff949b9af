// The CUDA bucket copies (parallel/ops/cuda/bucket.cu) against their CPU twin, bit for bit, on
// a side stream as data parallelism runs them: every dtype pair, the predivide and postdivide
// factors, missing gradients, more than one multi-tensor launch's worth of slices.
#include <boost/test/unit_test.hpp>
#include <cstring>

#include "parallel/ddp.h"
#include "parallel/ops/bucket.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/handles.h"
#endif

using namespace alloy;
using namespace alloy::parallel;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(bucket_gpu)

#ifdef ALLOY_HAVE_CUDA

BOOST_AUTO_TEST_CASE(matches_the_cpu_bit_for_bit_on_a_side_stream) {
  Generator generator(29);
  cuda::Stream side(0);
  for (const DType grad_dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const DType bucket_dtype : {grad_dtype, DType::f32}) {
      for (const float factor : {1.0f, 0.5f, postdivide_factor(3), postdivide_factor(8)}) {
        std::vector<BucketSlice> cpu;
        std::vector<BucketSlice> gpu;
        std::int64_t numel = 0;
        for (int i = 0; i < 70; ++i) {  // two launches of 64 and 6
          const std::int64_t count = i % 7 == 3 ? 0 : 1 + (i * 37) % 500;
          Tensor grad = random_tensor({count}, grad_dtype, generator, -70000.0f, 70000.0f);
          if (i % 11 == 5) grad = Tensor();  // never computed
          cpu.push_back({grad.defined() ? grad.clone() : Tensor(), numel, count});
          gpu.push_back({grad.defined() ? to_cuda(grad) : Tensor(), numel, count});
          numel += count;
        }
        const std::string what =
            detail::concat(dtype_name(grad_dtype), " -> ", dtype_name(bucket_dtype), " x ", factor);
        Tensor cpu_bucket = Tensor::zeros({numel}, bucket_dtype);
        Tensor gpu_bucket = to_cuda(cpu_bucket);
        cpu_bucket.fill(3.0f);  // missing gradients must overwrite whatever is there
        copy_into_bucket(cpu, cpu_bucket, factor);
        copy_into_bucket(gpu, gpu_bucket, factor, side.get());
        side.synchronize("the bucket copy-in test");
        check_gpu_equal(gpu_bucket, cpu_bucket, "copy-in " + what);
        copy_from_bucket(cpu_bucket, cpu, factor);
        copy_from_bucket(gpu_bucket, gpu, factor, side.get());
        side.synchronize("the bucket copy-out test");
        for (std::size_t i = 0; i < cpu.size(); ++i) {
          if (cpu[i].grad.defined()) {
            check_gpu_equal(gpu[i].grad, cpu[i].grad,
                            "copy-out " + what + " slice " + std::to_string(i));
          }
        }
      }
    }
  }
}

#else

BOOST_AUTO_TEST_CASE(needs_the_cuda_backend) {}  // never reached: the fixture skips first

#endif

BOOST_AUTO_TEST_SUITE_END()
