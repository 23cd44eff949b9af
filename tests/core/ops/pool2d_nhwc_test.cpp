// Channels-last pooling on the CPU is NCHW pooling of the permuted tensors: the same bits for
// both pools' outputs and gradients, and argmax keeping its NCHW meaning (h * W + w within the
// (n, c) plane) in y's channels-last shape.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ops/permute.h"
#include "core/ops/pool2d.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

// Tiling, overlapping and padded, and non-square windows.
const Pool2dParams kParams[] = {
    {2, 2, 2, 2, 0, 0},
    {3, 3, 2, 2, 1, 1},
    {3, 2, 1, 2, 1, 0},
};
// Odd channel counts and odd planes.
const Shape kShapes[] = {{2, 5, 7, 9}, {1, 3, 9, 7}, {3, 1, 5, 5}};

void check_same_bits(const Tensor& actual, const Tensor& expected, const std::string& what) {
  BOOST_TEST((actual.shape() == expected.shape()), what << ": shape " << actual.str());
  BOOST_TEST((actual.dtype() == expected.dtype()), what);
  BOOST_TEST(std::memcmp(actual.raw(), expected.raw(), expected.nbytes()) == 0, what);
}

std::string describe(DType dtype, const Shape& shape, const Pool2dParams& p) {
  return std::string(dtype_name(dtype)) + " x " + shape_str(shape) + " kernel " +
         std::to_string(p.kernel_h) + "x" + std::to_string(p.kernel_w) + " stride " +
         std::to_string(p.stride_h) + "x" + std::to_string(p.stride_w);
}

// Few distinct values, so that max pooling meets ties.
Tensor rounded(const Shape& shape, DType dtype, Generator& generator) {
  Tensor x = random_tensor(shape, dtype, generator, -4.0f, 4.0f);
  std::vector<float> values = x.to_floats();
  for (float& value : values)
    value = std::round(value);
  x.copy_from_floats(values);
  return x;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(pool2d_nhwc)

BOOST_AUTO_TEST_CASE(output_shape_is_n_p_q_c) {
  const Shape y = pool2d_output_shape({2, 9, 7, 5}, {3, 3, 2, 2, 1, 1}, Layout::nhwc);
  BOOST_TEST((y == Shape{2, 5, 4, 5}), shape_str(y));
}

BOOST_AUTO_TEST_CASE(average_pooling_is_the_nchw_pooling_permuted) {
  Generator generator(61);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const Shape& shape : kShapes) {
      for (const Pool2dParams& params : kParams) {
        const std::string what = describe(dtype, shape, params);
        const Tensor x = random_tensor(shape, dtype, generator);
        const Tensor y = avg_pool2d_forward(x, params);
        check_same_bits(avg_pool2d_forward(to_channels_last(x), params, Layout::nhwc),
                        to_channels_last(y), "avg forward " + what);
        const Tensor dy = random_tensor(y.shape(), dtype, generator);
        const Shape x_last = to_channels_last(x).shape();
        check_same_bits(avg_pool2d_backward(to_channels_last(dy), x_last, params, Layout::nhwc),
                        to_channels_last(avg_pool2d_backward(dy, shape, params)),
                        "avg backward " + what);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(max_pooling_is_the_nchw_pooling_permuted) {
  Generator generator(62);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const Shape& shape : kShapes) {
      for (const Pool2dParams& params : kParams) {
        const std::string what = describe(dtype, shape, params);
        const Tensor x = rounded(shape, dtype, generator);
        const MaxPoolResult nchw = max_pool2d_forward(x, params);
        const MaxPoolResult nhwc = max_pool2d_forward(to_channels_last(x), params, Layout::nhwc);
        check_same_bits(nhwc.y, to_channels_last(nchw.y), "max forward " + what);
        check_same_bits(nhwc.argmax, to_channels_last(nchw.argmax), "argmax " + what);
        const Tensor dy = random_tensor(nchw.y.shape(), dtype, generator);
        check_same_bits(max_pool2d_backward(to_channels_last(dy), nhwc.argmax,
                                            to_channels_last(x).shape(), Layout::nhwc),
                        to_channels_last(max_pool2d_backward(dy, nchw.argmax, shape)),
                        "max backward " + what);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(mismatched_shapes_are_refused) {
  Generator generator(63);
  const Pool2dParams params{2, 2, 2, 2, 0, 0};
  const Tensor x = random_tensor({2, 6, 6, 3}, DType::f32, generator);  // NHWC, 3 channels
  const MaxPoolResult r = max_pool2d_forward(x, params, Layout::nhwc);
  BOOST_TEST((r.y.shape() == Shape{2, 3, 3, 3}));
  // x's shape read as NHWC with 4 channels where dy has 3.
  BOOST_CHECK_THROW(max_pool2d_backward(r.y, r.argmax, {2, 6, 6, 4}, Layout::nhwc), Error);
  BOOST_CHECK_THROW(avg_pool2d_backward(r.y, {2, 6, 6, 4}, params, Layout::nhwc), Error);
  BOOST_CHECK_THROW(
      avg_pool2d_forward(random_tensor({2, 6, 6}, DType::f32, generator), params, Layout::nhwc),
      Error);
}

BOOST_AUTO_TEST_SUITE_END()
