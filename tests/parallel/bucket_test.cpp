// The CPU bucket copies of data parallelism (parallel/ops/bucket.h) against a float64
// reference: each value times the factor, rounded to fp32 (the product of a half or f32 value
// and an f32 factor is exact in float64, so this is the fp32 multiplication) and then once to
// the destination's dtype. Also: zeros for missing gradients, bits kept by plain copies, and
// slices that do not fit refused.
#include "parallel/ops/bucket.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/half.h"
#include "core/random.h"
#include "parallel/ddp.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::parallel;
using alloy::test::random_tensor;

namespace {

// The reference rounding of one value into `dtype`.
float reference(double value, double factor, DType dtype) {
  const auto product = static_cast<float>(value * factor);
  switch (dtype) {
    case DType::f16:
      return round_to_half(product);
    case DType::bf16:
      return round_to_bf16(product);
    default:
      return product;
  }
}

// Gradients of 5, 0 (empty), 300 and 17 elements laid out as a bucket plan would.
struct Case {
  std::vector<BucketSlice> slices;
  std::int64_t numel = 0;
};

Case make_case(DType dtype, Generator& generator, float low, float high) {
  Case c;
  for (const std::int64_t count : {5, 0, 300, 17}) {
    c.slices.push_back({random_tensor({count}, dtype, generator, low, high), c.numel, count});
    c.numel += count;
  }
  return c;
}

const std::vector<float> kFactors{
    1.0f,       0.5f, 0.25f, postdivide_factor(3), postdivide_factor(5), postdivide_factor(8),
    1.0f / 3.0f};

}  // namespace

BOOST_AUTO_TEST_SUITE(bucket_copies)

BOOST_AUTO_TEST_CASE(copy_in_and_out_match_the_float64_reference) {
  Generator generator(11);
  for (const DType grad_dtype : {DType::f32, DType::f16, DType::bf16}) {
    // Half gradients reduced in fp32 are widened into an f32 bucket.
    std::vector<DType> bucket_dtypes{grad_dtype};
    if (is_half(grad_dtype)) bucket_dtypes.push_back(DType::f32);
    for (const DType bucket_dtype : bucket_dtypes) {
      for (const float factor : kFactors) {
        // Wide enough that f16 products overflow and underflow at the ends.
        const Case c = make_case(grad_dtype, generator, -70000.0f, 70000.0f);
        const Tensor bucket = Tensor::empty({c.numel}, bucket_dtype);
        copy_into_bucket(c.slices, bucket, factor);
        const std::vector<float> flat = bucket.to_floats();
        for (const BucketSlice& slice : c.slices) {
          const std::vector<float> grad = slice.grad.to_floats();
          for (std::int64_t i = 0; i < slice.count; ++i) {
            const float want = reference(grad[static_cast<std::size_t>(i)], factor, bucket_dtype);
            const float got = flat[static_cast<std::size_t>(slice.offset + i)];
            BOOST_TEST((got == want || (std::isnan(got) && std::isnan(want))),
                       dtype_name(grad_dtype)
                           << " -> " << dtype_name(bucket_dtype) << " x " << factor << " element "
                           << slice.offset + i << ": " << got << " != " << want);
          }
        }
        // And back: each gradient becomes its bucket values times the factor.
        copy_from_bucket(bucket, c.slices, factor);
        for (const BucketSlice& slice : c.slices) {
          const std::vector<float> grad = slice.grad.to_floats();
          for (std::int64_t i = 0; i < slice.count; ++i) {
            const float want =
                reference(flat[static_cast<std::size_t>(slice.offset + i)], factor, grad_dtype);
            const float got = grad[static_cast<std::size_t>(i)];
            BOOST_TEST((got == want || (std::isnan(got) && std::isnan(want))),
                       "back into " << dtype_name(grad_dtype) << " x " << factor << " element " << i
                                    << ": " << got << " != " << want);
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(missing_gradients_contribute_zeros_and_receive_nothing) {
  Generator generator(5);
  Case c = make_case(DType::f16, generator, -1.0f, 1.0f);
  c.slices[2].grad = Tensor();  // never computed in this backward
  Tensor bucket = Tensor::empty({c.numel}, DType::f16);
  bucket.fill(7.0f);
  copy_into_bucket(c.slices, bucket, 0.5f);
  const std::vector<float> flat = bucket.to_floats();
  for (std::int64_t i = 0; i < c.slices[2].count; ++i)
    BOOST_TEST(flat[static_cast<std::size_t>(c.slices[2].offset + i)] == 0.0f);
  copy_from_bucket(bucket, c.slices, 2.0f);  // skips the missing one without complaint
  BOOST_TEST(!c.slices[2].grad.defined());
}

BOOST_AUTO_TEST_CASE(a_factor_of_one_copies_the_bits) {
  // A NaN with a payload and a negative zero survive a plain copy both ways.
  const Tensor grad = Tensor::empty({3}, DType::f16);
  grad.half_data()[0] = 0x7e01;
  grad.half_data()[1] = 0x8000;
  grad.half_data()[2] = 0x3c00;
  const Tensor bucket = Tensor::empty({3}, DType::f16);
  copy_into_bucket({{grad, 0, 3}}, bucket, 1.0f);
  BOOST_TEST(std::memcmp(bucket.raw(), grad.raw(), 6) == 0);
  const Tensor back = Tensor::zeros({3}, DType::f16);
  copy_from_bucket(bucket, {{back, 0, 3}}, 1.0f);
  BOOST_TEST(std::memcmp(back.raw(), grad.raw(), 6) == 0);
}

BOOST_AUTO_TEST_CASE(slices_that_do_not_fit_are_refused) {
  const Tensor bucket = Tensor::zeros({10}, DType::f32);
  const Tensor grad = Tensor::zeros({4}, DType::f32);
  BOOST_CHECK_EXCEPTION(
      copy_into_bucket({{grad, 8, 4}}, bucket, 1.0f), Error, [](const Error& error) {
        return std::string(error.what()).find("[8, 12) lies outside") != std::string::npos;
      });
  BOOST_CHECK_EXCEPTION(
      copy_from_bucket(bucket, {{grad, 0, 5}}, 1.0f), Error, [](const Error& error) {
        return std::string(error.what()).find("holds 5 elements") != std::string::npos;
      });
}

BOOST_AUTO_TEST_SUITE_END()
