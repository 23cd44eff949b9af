#include "core/ops/elementwise.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

// A small shape and one large enough to run on the thread pool in several blocks.
const Shape kShapes[] = {Shape{3, 7}, Shape{5, 20011}};

// The values nearest to `values` that `dtype` holds, rounded by the tested conversions.
std::vector<double> in_dtype(const std::vector<double>& values, DType dtype) {
  std::vector<float> floats(values.begin(), values.end());
  return to_doubles(Tensor::from_floats({static_cast<std::int64_t>(floats.size())}, floats, dtype));
}

std::string what(const char* op, DType a, DType b, const Shape& shape) {
  return std::string(op) + " " + dtype_name(a) + " " + dtype_name(b) + " " + shape_str(shape);
}

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(elementwise, TwoThreads)

BOOST_AUTO_TEST_CASE(cast_rounds_to_nearest_between_every_pair_of_dtypes) {
  Generator generator(1);
  for (const DType from : kFloatTypes) {
    for (const DType to : kFloatTypes) {
      for (const Shape& shape : kShapes) {
        const Tensor x = random_tensor(shape, from, generator, -70000.0f, 70000.0f);
        const Tensor y = cast(x, to, MemoryCategory::workspace);
        BOOST_TEST((y.dtype() == to));
        BOOST_TEST((y.shape() == shape));
        BOOST_TEST((y.category() == MemoryCategory::workspace));
        // Widening is exact and f16 -> bf16 goes through an exact f32, so one rounding from
        // the source values gives the expected bits; values past 65504 become inf in f16.
        // (The scalar conversions themselves are checked against a model in half_test.)
        const auto source = to_doubles(x);
        const auto expected = to_doubles(
            Tensor::from_floats(shape, std::vector<float>(source.begin(), source.end()), to));
        check_close(y, expected, 0.0, 0.0, what("cast", from, to, shape));
        Tensor into = Tensor::zeros(shape, to);
        cast_into(x, into);
        check_close(into, expected, 0.0, 0.0, what("cast_into", from, to, shape));
      }
    }
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto special = cast(Tensor::from_floats({3}, {nan, -0.0f, 1e-30f}), DType::f16).to_floats();
  BOOST_TEST(std::isnan(special[0]));
  BOOST_TEST((special[1] == 0.0f && std::signbit(special[1])));
  BOOST_TEST(special[2] == 0.0f);
}

BOOST_AUTO_TEST_CASE(add_matches_float64_in_the_first_operands_dtype) {
  Generator generator(2);
  for (const DType a_dtype : kFloatTypes) {
    for (const DType b_dtype : kFloatTypes) {
      for (const Shape& shape : kShapes) {
        const Tensor a = random_tensor(shape, a_dtype, generator);
        const Tensor b = random_tensor(shape, b_dtype, generator);
        const Tensor y = add(a, b);
        BOOST_TEST((y.dtype() == a_dtype));
        const auto av = to_doubles(a), bv = to_doubles(b);
        std::vector<double> expected(av.size());
        for (std::size_t i = 0; i < av.size(); ++i)
          expected[i] = av[i] + bv[i];
        check_close(y, expected, dtype_tolerance(a_dtype), 0.0,
                    what("add", a_dtype, b_dtype, shape));
        // The sum of two floats is exact in double: an f32 result must be its nearest float.
        if (a_dtype == DType::f32)
          check_close(y, in_dtype(expected, DType::f32), 0.0, 0.0, "add exact");
      }
    }
  }
  // Half sums saturate to inf like the GPU's.
  const Tensor big = Tensor::from_floats({1}, {60000.0f}, DType::f16);
  BOOST_TEST(std::isinf(add(big, big).to_floats()[0]));
}

BOOST_AUTO_TEST_CASE(axpby_and_scale_match_float64) {
  Generator generator(3);
  for (const DType x_dtype : kFloatTypes) {
    for (const DType y_dtype : kFloatTypes) {
      for (const Shape& shape : kShapes) {
        for (const float beta : {0.0f, -0.5f, 1.0f}) {
          const Tensor x = random_tensor(shape, x_dtype, generator);
          Tensor y = random_tensor(shape, y_dtype, generator);
          const auto xv = to_doubles(x), yv = to_doubles(y);
          std::vector<double> expected(xv.size());
          for (std::size_t i = 0; i < xv.size(); ++i)
            expected[i] = 0.25 * xv[i] + beta * yv[i];
          axpby(0.25f, x, beta, y);
          BOOST_TEST((y.dtype() == y_dtype));
          check_close(y, expected, dtype_tolerance(y_dtype), 1e-7,
                      what("axpby", x_dtype, y_dtype, shape) + " beta " + std::to_string(beta));
        }
      }
    }
    Tensor t = random_tensor({5, 20011}, x_dtype, generator);
    auto expected = to_doubles(t);
    for (auto& value : expected)
      value *= -3.0;
    scale(t, -3.0f);
    check_close(t, expected, dtype_tolerance(x_dtype), 0.0,
                std::string("scale ") + dtype_name(x_dtype));
  }
  // beta == 0 ignores y's old contents, NaN included (a fresh buffer may hold anything).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const DType dtype : kFloatTypes) {
    Tensor y = Tensor::from_floats({2}, {nan, nan}, dtype);
    axpby(2.0f, Tensor::from_floats({2}, {1.0f, -1.0f}), 0.0f, y);
    BOOST_TEST(y.to_floats() == (std::vector<float>{2.0f, -2.0f}), dtype_name(dtype));
  }
}

BOOST_AUTO_TEST_CASE(normalize_images_divides_by_255_and_rounds_once) {
  std::vector<float> pixels(256 * 200);
  for (std::size_t i = 0; i < pixels.size(); ++i)
    pixels[i] = static_cast<float>((i * 37) % 256);
  const Tensor images = Tensor::from_floats({200, 1, 16, 16}, pixels, DType::u8);
  for (const DType dtype : kFloatTypes) {
    const Tensor y = normalize_images(images, dtype);
    BOOST_TEST((y.dtype() == dtype));
    BOOST_TEST((y.shape() == images.shape()));
    std::vector<double> expected(pixels.size());
    for (std::size_t i = 0; i < pixels.size(); ++i)
      expected[i] = pixels[i] / 255.0;
    check_close(y, expected, dtype_tolerance(dtype), 0.0,
                std::string("normalize_images ") + dtype_name(dtype));
    const auto values = y.to_floats();
    BOOST_TEST(values[0] == 0.0f);
    BOOST_TEST(*std::max_element(values.begin(), values.end()) == 1.0f);
  }
  BOOST_CHECK_THROW(normalize_images(Tensor::zeros({2, 2}, DType::f32), DType::f32), Error);
}

BOOST_AUTO_TEST_CASE(flatten_is_a_view) {
  Tensor x = Tensor::zeros({2, 3, 4, 5}, DType::bf16);
  const Tensor flat = flatten(x);
  BOOST_TEST((flat.shape() == Shape{2, 60}));
  BOOST_TEST(flat.raw() == x.raw());
  BOOST_CHECK_THROW(flatten(Tensor::zeros({7}, DType::f32)), Error);
  BOOST_CHECK_THROW(flatten(Tensor()), Error);
}

BOOST_AUTO_TEST_CASE(rejects_bad_inputs) {
  const Tensor f = Tensor::zeros({2, 3}, DType::f32);
  const Tensor labels = Tensor::zeros({2, 3}, DType::i32);
  BOOST_CHECK_THROW(cast(labels, DType::f32), Error);
  BOOST_CHECK_THROW(cast(f, DType::u8), Error);
  BOOST_CHECK_THROW(add(f, Tensor::zeros({3, 2}, DType::f32)), Error);
  BOOST_CHECK_THROW(add(f, labels), Error);
  Tensor y = Tensor::zeros({6}, DType::f32);
  BOOST_CHECK_THROW(axpby(1.0f, f, 1.0f, y), Error);
  Tensor out = Tensor::zeros({2, 4}, DType::f16);
  BOOST_CHECK_THROW(cast_into(f, out), Error);
  Tensor i = Tensor::zeros({2}, DType::i32);
  BOOST_CHECK_THROW(scale(i, 2.0f), Error);
}

BOOST_AUTO_TEST_SUITE_END()
