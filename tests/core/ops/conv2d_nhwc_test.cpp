// The channels-last convolution on the CPU is the NCHW one on permuted tensors: the same bits
// for y (with bias), dx, and the KCRS dw and db it accumulates into, in every dtype.
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/ops/conv2d.h"
#include "core/ops/permute.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

struct Case {
  Shape x, w;
  Conv2dParams params;
};

// Odd channel counts, odd planes, strides, padding, 1x1 and 5x5 kernels.
const Case kCases[] = {
    {{2, 3, 7, 5}, {4, 3, 3, 3}, {1, 1, 1, 1}},
    {{3, 5, 9, 9}, {6, 5, 3, 3}, {2, 2, 1, 1}},
    {{2, 7, 6, 6}, {3, 7, 1, 1}, {1, 1, 0, 0}},
    {{1, 1, 5, 5}, {2, 1, 5, 5}, {1, 1, 2, 2}},
};

void check_same_bits(const Tensor& actual, const Tensor& expected, const std::string& what) {
  BOOST_TEST((actual.shape() == expected.shape()), what << ": shape " << actual.str());
  BOOST_TEST((actual.dtype() == expected.dtype()), what);
  BOOST_TEST(std::memcmp(actual.raw(), expected.raw(), expected.nbytes()) == 0, what);
}

std::string describe(DType dtype, const Case& c) {
  return std::string(dtype_name(dtype)) + " x " + shape_str(c.x) + " w " + shape_str(c.w);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(conv2d_nhwc)

BOOST_AUTO_TEST_CASE(output_shape_is_n_p_q_k) {
  const Shape y = conv2d_output_shape({2, 9, 7, 3}, {4, 3, 3, 3}, {2, 1, 1, 0}, Layout::nhwc);
  BOOST_TEST((y == Shape{2, 5, 5, 4}), shape_str(y));
}

BOOST_AUTO_TEST_CASE(forward_is_the_nchw_forward_permuted) {
  Generator generator(81);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const Case& c : kCases) {
      const std::string what = describe(dtype, c);
      const Tensor x = random_tensor(c.x, dtype, generator);
      const Tensor w = random_tensor(c.w, dtype, generator);
      const Tensor b = random_tensor({c.w[0]}, dtype, generator);
      check_same_bits(conv2d_forward(to_channels_last(x), w, b, c.params, Layout::nhwc),
                      to_channels_last(conv2d_forward(x, w, b, c.params)), "y " + what);
      check_same_bits(conv2d_forward(to_channels_last(x), w, Tensor(), c.params, Layout::nhwc),
                      to_channels_last(conv2d_forward(x, w, Tensor(), c.params)),
                      "y without bias " + what);
    }
  }
}

BOOST_AUTO_TEST_CASE(backward_is_the_nchw_backward_permuted) {
  Generator generator(82);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const Case& c : kCases) {
      const Tensor x = random_tensor(c.x, dtype, generator);
      const Tensor w = random_tensor(c.w, dtype, generator);
      const Tensor dy = random_tensor(conv2d_output_shape(c.x, c.w, c.params), dtype, generator);
      // Accumulators holding earlier gradients, in the data's dtype and in f32 (O1).
      for (const DType grad_type : {dtype, DType::f32}) {
        const std::string what =
            describe(dtype, c) + " with " + dtype_name(grad_type) + " accumulators";
        const Tensor dw0 = random_tensor(c.w, grad_type, generator);
        const Tensor db0 = random_tensor({c.w[0]}, grad_type, generator);
        Tensor dw = dw0.clone(), db = db0.clone();
        Tensor dw_nhwc = dw0.clone(), db_nhwc = db0.clone();
        const Conv2dGrads nchw = conv2d_backward(x, w, dy, dw, db, c.params, true);
        const Conv2dGrads nhwc = conv2d_backward(to_channels_last(x), w, to_channels_last(dy),
                                                 dw_nhwc, db_nhwc, c.params, true, Layout::nhwc);
        check_same_bits(nhwc.dx, to_channels_last(nchw.dx), "dx " + what);
        check_same_bits(dw_nhwc, dw, "dw " + what);
        check_same_bits(db_nhwc, db, "db " + what);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(mismatched_channels_are_refused) {
  Generator generator(83);
  // An NCHW-shaped x read as NHWC has 5 channels where w wants 3.
  const Tensor x = random_tensor({2, 3, 6, 5}, DType::f32, generator);
  const Tensor w = random_tensor({4, 3, 3, 3}, DType::f32, generator);
  BOOST_CHECK_THROW(conv2d_forward(x, w, Tensor(), {1, 1, 1, 1}, Layout::nhwc), Error);
  BOOST_CHECK_THROW(conv2d_forward(random_tensor({2, 3, 6}, DType::f32, generator), w, Tensor(),
                                   {1, 1, 1, 1}, Layout::nhwc),
                    Error);
}

BOOST_AUTO_TEST_SUITE_END()
