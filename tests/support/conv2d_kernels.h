// Support for the tests of Alloy's own convolution kernels, called directly
// (conv2d_direct_gpu_test, conv2d_implicit_gemm_gpu_test): the shapes every kernel runs, their
// geometry and description, the tolerance of an fp32 sum against the CPU's, and a workspace of
// garbage. Needs a CUDA build (ALLOY_HAVE_CUDA).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "core/cuda/context.h"
#include "core/ops/conv2d.h"
#include "tests/support/gpu.h"

namespace alloy::test {

struct ConvCase {
  Shape x, w;
  Conv2dParams params;
};

// Every direction runs each of these (stride 2 only forward and for the filter: the direct
// input gradient takes stride 1 only).
inline const ConvCase kConvCases[] = {
    {{3, 1, 28, 28}, {20, 1, 3, 3}, {1, 1, 0, 0}},  // LeNet's first layer
    // Its second: 50 filters and 20 channels, neither a multiple of 8.
    {{3, 20, 13, 13}, {50, 20, 5, 5}, {1, 1, 0, 0}},
    {{2, 1, 12, 12}, {16, 1, 3, 3}, {1, 1, 1, 1}},  // a 1-channel stem with padding
    {{2, 3, 9, 9}, {5, 3, 3, 3}, {2, 2, 1, 1}},     // stride 2
    {{2, 4, 7, 8}, {6, 4, 3, 5}, {1, 1, 1, 2}},     // non-square filter, unequal padding
    {{2, 3, 6, 7}, {4, 3, 2, 4}, {1, 1, 1, 0}},     // a width the direct kernels do not unroll
    // 6 channels, which the split forward's 4 warp groups share 1, 2, 1, 2; padded.
    {{3, 6, 8, 8}, {5, 6, 3, 3}, {1, 1, 1, 1}},
};

inline bool strided(const ConvCase& c) {
  return c.params.stride_h != 1 || c.params.stride_w != 1;
}

inline cpu::Conv2dGeometry geometry_of(const Shape& x, const Shape& w, const Conv2dParams& params,
                                       Layout layout = Layout::nchw) {
  const Shape y = conv2d_output_shape(x, w, params);
  return {static_cast<int>(x[0]),
          static_cast<int>(x[1]),
          static_cast<int>(x[2]),
          static_cast<int>(x[3]),
          static_cast<int>(w[0]),
          static_cast<int>(w[2]),
          static_cast<int>(w[3]),
          static_cast<int>(y[2]),
          static_cast<int>(y[3]),
          params,
          layout};
}

inline cpu::Conv2dGeometry geometry_of(const ConvCase& c) {
  return geometry_of(c.x, c.w, c.params);
}

inline std::string describe(DType dtype, const ConvCase& c) {
  return std::string(dtype_name(dtype)) + " x " + shape_str(c.x) + " w " + shape_str(c.w) +
         " stride " + std::to_string(c.params.stride_h) + "x" + std::to_string(c.params.stride_w) +
         " pad " + std::to_string(c.params.pad_h) + "x" + std::to_string(c.params.pad_w);
}

inline cudaStream_t default_stream() {
  return cuda::context(Device::cuda(0)).stream.get();
}

// The kernels sum exact products in fp32 and round once, as the CPU does, only in another
// order: a few ulp of the storage type plus fp32 roundings of the sum of |terms| (no operand
// transforms, so no half-precision allowance on the magnitude); atol as conv2d_gpu_test's.
inline void check_sum(const Tensor& gpu, const Tensor& cpu, const Tensor& magnitude, DType dtype,
                      double terms, const std::string& what) {
  const double tol = gpu_tolerance(dtype);
  const double atol = (dtype == DType::f32 ? 1e-5 : tol) * std::sqrt(terms);
  check_gpu_close_to_magnitude(gpu, cpu, magnitude, what, tol, atol, magnitude_scale(DType::f32));
}

// A device tensor of `shape` full of NaN, where a kernel must write everything.
inline Tensor nan_tensor(const Shape& shape, DType dtype) {
  Tensor garbage = Tensor::empty(shape, dtype, Device::cuda(0));
  garbage.fill(std::numeric_limits<float>::quiet_NaN());
  return garbage;
}

// A workspace of `bytes` filled with NaN: the kernels must not count on it being zero.
inline Tensor nan_workspace(std::size_t bytes) {
  Tensor workspace = Tensor::empty({static_cast<std::int64_t>((bytes + 3) / 4) + 1}, DType::f32,
                                   Device::cuda(0), MemoryCategory::workspace);
  workspace.fill(std::numeric_limits<float>::quiet_NaN());
  return workspace;
}

}  // namespace alloy::test
