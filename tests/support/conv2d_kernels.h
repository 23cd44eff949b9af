// Support for the tests of Alloy's own convolution kernels, called directly
// (conv2d_direct_gpu_test, conv2d_implicit_gemm_gpu_test): the shapes every kernel runs, their
// geometry and description, the tolerance of an fp32 sum against the CPU's, and a workspace of
// garbage. Needs a CUDA build (ALLOY_HAVE_CUDA).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
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

inline cpu::Conv2dGeometry geometry_of(const ConvCase& c) {
  return conv2d_geometry(c.x, c.w, c.params);
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

// A forward kernel: y (a new device tensor) = conv(x, w) + b, b possibly undefined.
using ForwardKernel = std::function<Tensor(const cpu::Conv2dGeometry&, const Tensor& x,
                                           const Tensor& w, const Tensor& b)>;

// `forward` on case c's random data in `dtype` against the CPU's convolution, with and without
// a bias, each run twice for equal bits; `name` leads the messages.
inline void check_forward_kernel(const std::string& name, const ConvCase& c, DType dtype,
                                 Generator& generator, const ForwardKernel& forward) {
  const std::string what = name + " " + describe(dtype, c);
  const cpu::Conv2dGeometry g = geometry_of(c);
  const Tensor x = random_tensor(c.x, dtype, generator);
  const Tensor w = random_tensor(c.w, dtype, generator, -0.2f, 0.2f);
  const Tensor b = random_tensor({c.w[0]}, dtype, generator);
  const Tensor x_gpu = to_cuda(x), w_gpu = to_cuda(w), b_gpu = to_cuda(b);
  const double terms = static_cast<double>(c.w[1] * c.w[2] * c.w[3]);
  for (const bool with_bias : {true, false}) {
    const Tensor bias = with_bias ? b : Tensor(), bias_gpu = with_bias ? b_gpu : Tensor();
    const std::string which = what + (with_bias ? " with bias" : " without bias");
    const Tensor y = forward(g, x_gpu, w_gpu, bias_gpu);
    check_sum(y, conv2d_forward(x, w, bias, c.params),
              conv2d_forward(abs_f32(x), abs_f32(w), with_bias ? abs_f32(b) : Tensor(), c.params),
              dtype, terms, which);
    check_gpu_equal(forward(g, x_gpu, w_gpu, bias_gpu), to_host(y), which + ", run twice");
  }
}

// A filter-gradient kernel: dw = dL/dw, or dw += dL/dw when `accumulate`.
using FilterKernel = std::function<void(const cpu::Conv2dGeometry&, const Tensor& x,
                                        const Tensor& dy, Tensor& dw, bool accumulate)>;

// `filter` on case c's random data in `dtype` against the CPU's gradient: overwriting garbage
// (NaN) in dw and adding to what dw holds (one fp32 addition, one rounding), each run twice for
// equal bits.
inline void check_filter_kernel(const std::string& name, const ConvCase& c, DType dtype,
                                Generator& generator, const FilterKernel& filter) {
  const std::string what = name + " " + describe(dtype, c);
  const cpu::Conv2dGeometry g = geometry_of(c);
  const Tensor x = random_tensor(c.x, dtype, generator);
  const Tensor w = random_tensor(c.w, dtype, generator, -0.2f, 0.2f);
  const Tensor dy = random_tensor(conv2d_output_shape(c.x, c.w, c.params), dtype, generator);
  const Tensor dw_start = random_tensor(c.w, dtype, generator);
  // The CPU adds the gradient to dw in fp32 and rounds once: from zero, the gradient itself;
  // from dw_start, dw_start + gradient.
  Tensor db, dw_fresh = Tensor::zeros(c.w, dtype), dw_added = dw_start.clone();
  conv2d_backward(x, w, dy, dw_fresh, db, c.params, false);
  conv2d_backward(x, w, dy, dw_added, db, c.params, false);
  Tensor dw_magnitude = Tensor::zeros(c.w, DType::f32);
  conv2d_backward(abs_f32(x), abs_f32(w), abs_f32(dy), dw_magnitude, db, c.params, false);
  const Tensor x_gpu = to_cuda(x), dy_gpu = to_cuda(dy);
  const Shape y = conv2d_output_shape(c.x, c.w, c.params);
  const double terms = static_cast<double>(y[0] * y[2] * y[3]);

  Tensor dw_gpu = nan_tensor(c.w, dtype);
  filter(g, x_gpu, dy_gpu, dw_gpu, false);
  check_sum(dw_gpu, dw_fresh, dw_magnitude, dtype, terms, what + " into garbage");
  Tensor dw_again = nan_tensor(c.w, dtype);
  filter(g, x_gpu, dy_gpu, dw_again, false);
  check_gpu_equal(dw_again, to_host(dw_gpu), what + ", run twice");

  Tensor dw_sum = to_cuda(dw_start);
  filter(g, x_gpu, dy_gpu, dw_sum, true);
  check_sum(dw_sum, dw_added, dw_magnitude, dtype, terms, what + " added to dw");
  Tensor dw_sum_again = to_cuda(dw_start);
  filter(g, x_gpu, dy_gpu, dw_sum_again, true);
  check_gpu_equal(dw_sum_again, to_host(dw_sum), what + " added to dw, run twice");
}

}  // namespace alloy::test
