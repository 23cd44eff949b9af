// Support for the gpu-labelled tests (*_gpu_test.cpp): each CUDA op against its CPU twin on
// fresh random inputs. Including this header installs a global fixture that, when no CUDA
// device is usable (no GPU, no driver, or a CPU-only build), prints the reason and exits 77,
// which ctest reports as skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt): never a silent
// pass.
#pragma once

#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <string>

#include "core/random.h"
#include "core/tensor.h"
#include "tests/support/gradcheck.h"

namespace alloy::test {

struct RequireCuda {
  RequireCuda();
};

// random_tensor(shape, dtype, generator, low, high) comes from gradcheck.h.
// Labels in [0, classes), i32 on the host.
Tensor random_labels(std::int64_t count, std::int64_t classes, Generator& generator);
Tensor to_cuda(const Tensor& host);
Tensor to_host(const Tensor& device);

// Relative tolerance of a result stored in `dtype` whose CPU and GPU versions differ only in
// fp32 summation order or FMA contraction: a few units in the last place of the storage.
double gpu_tolerance(DType dtype);

// Every element of the device tensor `gpu` within atol + rtol * |expected| of the host tensor
// `cpu` (NaN matches NaN, infinities must match); the message names `what`, the worst element
// and both values. rtol = 0 and atol = 0 ask for bitwise-equal values.
void check_gpu_close(const Tensor& gpu, const Tensor& cpu, const std::string& what, double rtol,
                     double atol);
inline void check_gpu_equal(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  check_gpu_close(gpu, cpu, what, 0.0, 0.0);
}

// For sums of products (convolutions): check_gpu_close's bound plus scale * magnitude[i], where
// `magnitude` (a host tensor of the same shape) holds each result's sum of |terms|, from the
// same op on |operands| on the CPU. cuDNN may transform the operands before summing (Winograd,
// FFT), whose rounding error grows with that sum rather than with the result: a correct result
// may differ from the CPU's direct sum by far more than a few ulp where terms cancel.
void check_gpu_close_to_magnitude(const Tensor& gpu, const Tensor& cpu, const Tensor& magnitude,
                                  const std::string& what, double rtol, double atol, double scale);
// The scale for a sum computed from `data`-typed operands: fp32 data 2^-16 (about 256 fp32
// roundings of the magnitude); half data gpu_tolerance(data), since an algorithm may round its
// transformed operands to the data's type.
double magnitude_scale(DType data);
// |x| as a host f32 tensor.
Tensor abs_f32(const Tensor& host);

}  // namespace alloy::test

#ifndef ALLOY_GPU_SUPPORT_SOURCE  // registered by each test, not by the support library
using AlloyRequireCuda = alloy::test::RequireCuda;
BOOST_TEST_GLOBAL_FIXTURE(AlloyRequireCuda);
#endif
