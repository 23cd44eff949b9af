#include "core/ops/pool2d.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "core/ops/relu.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

Pool2dParams make_params(int kh, int kw, int sh, int sw, int ph, int pw) {
  Pool2dParams p;
  p.kernel_h = kh;
  p.kernel_w = kw;
  p.stride_h = sh;
  p.stride_w = sw;
  p.pad_h = ph;
  p.pad_w = pw;
  return p;
}

// Square, overlapping, padded, strided and non-square windows over planes they do not tile.
const Pool2dParams kConfigs[] = {
    make_params(2, 2, 2, 2, 0, 0), make_params(3, 3, 1, 1, 1, 1), make_params(3, 3, 2, 2, 1, 1),
    make_params(2, 2, 1, 1, 0, 0), make_params(3, 2, 2, 1, 1, 0),
};

std::string describe(const Pool2dParams& p, DType dtype) {
  return std::string(dtype_name(dtype)) + " kernel " + std::to_string(p.kernel_h) + "x" +
         std::to_string(p.kernel_w) + " stride " + std::to_string(p.stride_h) + "x" +
         std::to_string(p.stride_w) + " pad " + std::to_string(p.pad_h) + "x" +
         std::to_string(p.pad_w);
}

// Naive float64 pooling over the zero-padded input; visits each window in row-major order.
struct Reference {
  Shape y_shape;
  std::vector<double> avg, max;
  std::vector<std::int64_t> argmax;
};

Reference reference_pool(const std::vector<double>& x, const Shape& shape, const Pool2dParams& p) {
  const std::int64_t n = shape[0], c = shape[1], h = shape[2], w = shape[3];
  const std::int64_t oh = (h + 2 * p.pad_h - p.kernel_h) / p.stride_h + 1;
  const std::int64_t ow = (w + 2 * p.pad_w - p.kernel_w) / p.stride_w + 1;
  Reference r;
  r.y_shape = {n, c, oh, ow};
  for (std::int64_t plane = 0; plane < n * c; ++plane) {
    for (std::int64_t i = 0; i < oh; ++i) {
      for (std::int64_t j = 0; j < ow; ++j) {
        double sum = 0.0;
        double best = -INFINITY;
        std::int64_t best_index = -1;
        for (std::int64_t a = 0; a < p.kernel_h; ++a) {
          for (std::int64_t b = 0; b < p.kernel_w; ++b) {
            const std::int64_t row = i * p.stride_h - p.pad_h + a;
            const std::int64_t col = j * p.stride_w - p.pad_w + b;
            if (row < 0 || row >= h || col < 0 || col >= w) continue;
            const double value = x[static_cast<std::size_t>(plane * h * w + row * w + col)];
            sum += value;
            if (best_index < 0 || value > best) {
              best = value;
              best_index = row * w + col;
            }
          }
        }
        r.avg.push_back(sum / static_cast<double>(p.kernel_h * p.kernel_w));
        r.max.push_back(best);
        r.argmax.push_back(best_index);
      }
    }
  }
  return r;
}

// dx of avg pooling in float64: every window spreads dy / kernel area over its inputs.
std::vector<double> reference_avg_backward(const std::vector<double>& dy, const Shape& x_shape,
                                           const Shape& y_shape, const Pool2dParams& p) {
  const std::int64_t h = x_shape[2], w = x_shape[3], oh = y_shape[2], ow = y_shape[3];
  std::vector<double> dx(static_cast<std::size_t>(shape_numel(x_shape)), 0.0);
  for (std::int64_t plane = 0; plane < x_shape[0] * x_shape[1]; ++plane) {
    for (std::int64_t i = 0; i < oh; ++i) {
      for (std::int64_t j = 0; j < ow; ++j) {
        const double share = dy[static_cast<std::size_t>(plane * oh * ow + i * ow + j)] /
                             static_cast<double>(p.kernel_h * p.kernel_w);
        for (std::int64_t a = 0; a < p.kernel_h; ++a) {
          for (std::int64_t b = 0; b < p.kernel_w; ++b) {
            const std::int64_t row = i * p.stride_h - p.pad_h + a;
            const std::int64_t col = j * p.stride_w - p.pad_w + b;
            if (row < 0 || row >= h || col < 0 || col >= w) continue;
            dx[static_cast<std::size_t>(plane * h * w + row * w + col)] += share;
          }
        }
      }
    }
  }
  return dx;
}

std::vector<double> reference_max_backward(const std::vector<double>& dy,
                                           const std::vector<std::int64_t>& argmax,
                                           const Shape& x_shape, const Shape& y_shape) {
  const std::int64_t in = x_shape[2] * x_shape[3], out = y_shape[2] * y_shape[3];
  std::vector<double> dx(static_cast<std::size_t>(shape_numel(x_shape)), 0.0);
  for (std::size_t o = 0; o < dy.size(); ++o) {
    const auto plane = static_cast<std::int64_t>(o) / out;
    dx[static_cast<std::size_t>(plane * in + argmax[o])] += dy[o];
  }
  return dx;
}

// Distinct values on a grid of spacing `gap`, shuffled: no ties, and no central difference
// with a step below gap / 2 can change which element of a window is the maximum.
Tensor distinct_values(const Shape& shape, Generator& generator, float gap) {
  std::vector<float> values(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = gap * (static_cast<float>(i) - static_cast<float>(values.size()) / 2.0f);
  }
  for (std::size_t i = values.size(); i > 1; --i) {
    std::swap(values[i - 1], values[generator.below(i)]);
  }
  return Tensor::from_floats(shape, values);
}

std::vector<double> as_doubles(const std::vector<std::int64_t>& values) {
  return {values.begin(), values.end()};
}

double forward_atol(DType dtype) {
  return dtype == DType::f32 ? 1e-6 : 1e-5;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(pool2d)

BOOST_AUTO_TEST_CASE(output_shape_follows_the_floor_formula) {
  const Pool2dParams p = make_params(3, 2, 2, 1, 1, 0);
  const Shape y = pool2d_output_shape({2, 3, 7, 6}, p);
  BOOST_TEST((y == Shape{2, 3, (7 + 2 - 3) / 2 + 1, (6 - 2) / 1 + 1}));
}

BOOST_AUTO_TEST_CASE(forward_matches_reference) {
  Generator generator(10);
  for (const DType dtype : kFloatTypes) {
    for (const Pool2dParams& p : kConfigs) {
      const Tensor x = random_tensor({2, 3, 7, 6}, dtype, generator);
      const Reference r = reference_pool(to_doubles(x), x.shape(), p);
      const Tensor avg = avg_pool2d_forward(x, p);
      BOOST_TEST((avg.shape() == r.y_shape));
      BOOST_TEST((avg.dtype() == dtype));
      check_close(avg, r.avg, dtype_tolerance(dtype), forward_atol(dtype),
                  "avg forward " + describe(p, dtype));
      // bf16 and f16 rounding makes ties common, so this also checks first-max selection.
      const MaxPoolResult max = max_pool2d_forward(x, p);
      BOOST_TEST((max.y.dtype() == dtype));
      BOOST_TEST((max.argmax.dtype() == DType::i32));
      check_close(max.y, r.max, 0.0, 0.0, "max forward " + describe(p, dtype));
      check_close(max.argmax, as_doubles(r.argmax), 0.0, 0.0, "argmax " + describe(p, dtype));
    }
  }
}

BOOST_AUTO_TEST_CASE(large_input_on_the_thread_pool) {
  Generator generator(11);
  for (const DType dtype : kFloatTypes) {
    const Pool2dParams p = make_params(2, 2, 2, 2, 0, 0);
    const Tensor x = random_tensor({8, 16, 32, 32}, dtype, generator);
    const Reference r = reference_pool(to_doubles(x), x.shape(), p);
    check_close(avg_pool2d_forward(x, p), r.avg, dtype_tolerance(dtype), forward_atol(dtype),
                std::string("large avg forward ") + dtype_name(dtype));
    const MaxPoolResult max = max_pool2d_forward(x, p);
    check_close(max.y, r.max, 0.0, 0.0, std::string("large max forward ") + dtype_name(dtype));
    check_close(max.argmax, as_doubles(r.argmax), 0.0, 0.0, "large argmax");

    const Tensor dy = random_tensor(r.y_shape, dtype, generator);
    const auto dys = to_doubles(dy);
    check_close(avg_pool2d_backward(dy, x.shape(), p),
                reference_avg_backward(dys, x.shape(), r.y_shape, p), dtype_tolerance(dtype),
                forward_atol(dtype), std::string("large avg backward ") + dtype_name(dtype));
    check_close(max_pool2d_backward(dy, max.argmax, x.shape()),
                reference_max_backward(dys, r.argmax, x.shape(), r.y_shape), 0.0, 0.0,
                std::string("large max backward ") + dtype_name(dtype));
  }
}

BOOST_AUTO_TEST_CASE(ties_pick_the_first_maximum_and_nan_propagates) {
  const Pool2dParams p = make_params(2, 2, 2, 2, 0, 0);
  for (const DType dtype : kFloatTypes) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    // Plane 4x4: window (0,0) all equal; window (0,1) ties at its 2nd and 4th; window (1,0)
    // holds a NaN after a larger number; window (1,1) is all -inf.
    const float inf = std::numeric_limits<float>::infinity();
    const Tensor x = Tensor::from_floats({1, 1, 4, 4},
                                         {1, 1, 0, 5,          //
                                          1, 1, 2, 5,          //
                                          9, nan, -inf, -inf,  //
                                          3, 4, -inf, -inf},
                                         dtype);
    const MaxPoolResult r = max_pool2d_forward(x, p);
    const auto y = r.y.to_floats();
    const auto index = r.argmax.to_floats();
    BOOST_TEST(y[0] == 1.0f);
    BOOST_TEST(index[0] == 0.0f);
    BOOST_TEST(y[1] == 5.0f);
    BOOST_TEST(index[1] == 3.0f);
    BOOST_TEST(std::isnan(y[2]));
    BOOST_TEST(index[2] == 9.0f);
    BOOST_TEST(y[3] == -inf);
    BOOST_TEST(index[3] == 10.0f);
  }
}

BOOST_AUTO_TEST_CASE(avg_divides_by_the_full_window_including_padding) {
  // A corner window of a 3x3 kernel with padding 1 covers 4 ones: 4 / 9, as in PyTorch.
  const Tensor x = Tensor::from_floats({1, 1, 2, 2}, {1, 1, 1, 1});
  const auto y = avg_pool2d_forward(x, make_params(3, 3, 1, 1, 1, 1)).to_floats();
  for (const float value : y)
    BOOST_TEST(value == 4.0f / 9.0f);
}

BOOST_AUTO_TEST_CASE(avg_backward_matches_central_differences) {
  Generator generator(12);
  for (const Pool2dParams& p : kConfigs) {
    Tensor x = random_tensor({2, 2, 7, 6}, DType::f32, generator);
    const Shape y_shape = pool2d_output_shape(x.shape(), p);
    const Tensor dy = random_tensor(y_shape, DType::f32, generator);
    const auto w = to_doubles(dy);
    const auto loss = [&] { return weighted_sum(avg_pool2d_forward(x, p), w); };
    const auto numerical = numerical_gradient(loss, x, 1e-2f);
    check_close(avg_pool2d_backward(dy, x.shape(), p), numerical, 1e-3, 1e-4,
                "avg dx vs central differences " + describe(p, DType::f32));
  }
}

BOOST_AUTO_TEST_CASE(max_backward_matches_central_differences) {
  Generator generator(13);
  for (const Pool2dParams& p : kConfigs) {
    Tensor x = distinct_values({2, 2, 7, 6}, generator, 0.01f);
    const MaxPoolResult r = max_pool2d_forward(x, p);
    const Tensor dy = random_tensor(r.y.shape(), DType::f32, generator);
    const auto w = to_doubles(dy);
    const auto loss = [&] { return weighted_sum(max_pool2d_forward(x, p).y, w); };
    const auto numerical = numerical_gradient(loss, x, 2e-3f);
    check_close(max_pool2d_backward(dy, r.argmax, x.shape()), numerical, 1e-3, 1e-4,
                "max dx vs central differences " + describe(p, DType::f32));
  }
}

BOOST_AUTO_TEST_CASE(half_backward_matches_float64_reference) {
  Generator generator(14);
  for (const DType dtype : {DType::f16, DType::bf16}) {
    for (const Pool2dParams& p : kConfigs) {
      const Tensor x = random_tensor({2, 3, 7, 6}, dtype, generator);
      const Reference r = reference_pool(to_doubles(x), x.shape(), p);
      const Tensor dy = random_tensor(r.y_shape, dtype, generator);
      const auto dys = to_doubles(dy);
      const Tensor avg_dx = avg_pool2d_backward(dy, x.shape(), p);
      BOOST_TEST((avg_dx.dtype() == dtype));
      check_close(avg_dx, reference_avg_backward(dys, x.shape(), r.y_shape, p),
                  dtype_tolerance(dtype), 1e-5, "avg dx " + describe(p, dtype));
      // Overlapping windows add several gradients into one element: summed in fp32 and rounded
      // once, so the result is within the dtype's tolerance of the exact sum.
      const MaxPoolResult max = max_pool2d_forward(x, p);
      const Tensor max_dx = max_pool2d_backward(dy, max.argmax, x.shape());
      BOOST_TEST((max_dx.dtype() == dtype));
      check_close(max_dx, reference_max_backward(dys, r.argmax, x.shape(), r.y_shape),
                  dtype_tolerance(dtype), 1e-5, "max dx " + describe(p, dtype));
    }
  }
}

BOOST_AUTO_TEST_CASE(relu_then_pool_fused_gives_the_composition_bit_for_bit) {
  Generator generator(47);
  const Pool2dParams halving = make_params(2, 2, 2, 2, 0, 0);
  const Shape shape = {3, 4, 9, 8};  // an odd height: the last row is under no window
  for (const DType dtype : kFloatTypes) {
    // Random values with the special ones ReLU treats apart: -0, +0, NaN, +-inf.
    std::vector<float> values = test::random_tensor(shape, DType::f32, generator).to_floats();
    const float specials[] = {-0.0f, 0.0f, std::numeric_limits<float>::quiet_NaN(), INFINITY,
                              -INFINITY};
    for (std::size_t i = 0; i < values.size(); i += 7)
      values[i] = specials[(i / 7) % 5];
    const Tensor x = Tensor::from_floats(shape, values, dtype);
    const std::string what = std::string(dtype_name(dtype));
    const Tensor y = relu_avg_pool2d_forward(x, halving);
    BOOST_TEST(test::same_bits(y, avg_pool2d_forward(relu_forward(x), halving)), what);
    for (const DType grad_type : {dtype, DType::f32}) {
      std::vector<float> grads = test::random_tensor(y.shape(), DType::f32, generator).to_floats();
      grads[0] = -0.0f;
      const Tensor dy = Tensor::from_floats(y.shape(), grads, grad_type);
      const Tensor apart = relu_backward(relu_forward(x), avg_pool2d_backward(dy, shape, halving));
      BOOST_TEST(test::same_bits(relu_avg_pool2d_backward(x, dy, halving), apart),
                 what << " with " << dtype_name(grad_type) << " gradients");
    }
  }
  BOOST_TEST(relu_avg_pool2d_fuses(halving, Layout::nchw));
  BOOST_TEST(!relu_avg_pool2d_fuses(halving, Layout::nhwc));
  for (const Pool2dParams& other : {make_params(3, 3, 2, 2, 1, 1), make_params(2, 2, 1, 1, 0, 0),
                                    make_params(2, 2, 2, 2, 1, 1)}) {
    BOOST_TEST(!relu_avg_pool2d_fuses(other, Layout::nchw));
    BOOST_CHECK_EXCEPTION(relu_avg_pool2d_forward(Tensor::zeros({1, 1, 4, 4}, DType::f32), other),
                          Error, [](const Error& e) {
                            return std::string(e.what()).find("only 2x2 windows") !=
                                   std::string::npos;
                          });
  }
  BOOST_CHECK_THROW(relu_avg_pool2d_backward(Tensor::zeros({1, 1, 4, 4}, DType::f32),
                                             Tensor::zeros({1, 1, 3, 2}, DType::f32), halving),
                    Error);
}

BOOST_AUTO_TEST_CASE(rejects_bad_shapes_and_params) {
  const Tensor x = Tensor::zeros({1, 2, 4, 4}, DType::f32);
  const Pool2dParams ok = make_params(2, 2, 2, 2, 0, 0);
  BOOST_CHECK_THROW(avg_pool2d_forward(Tensor::zeros({2, 4, 4}, DType::f32), ok), Error);
  BOOST_CHECK_THROW(max_pool2d_forward(Tensor::zeros({1, 2, 4, 4}, DType::u8), ok), Error);
  BOOST_CHECK_THROW(avg_pool2d_forward(x, make_params(0, 2, 2, 2, 0, 0)), Error);
  BOOST_CHECK_THROW(avg_pool2d_forward(x, make_params(2, 2, 0, 2, 0, 0)), Error);
  BOOST_CHECK_THROW(avg_pool2d_forward(x, make_params(2, 2, 2, 2, 2, 0)), Error);
  BOOST_CHECK_THROW(max_pool2d_forward(x, make_params(2, 2, 2, 2, -1, 0)), Error);
  BOOST_CHECK_THROW(max_pool2d_forward(x, make_params(5, 5, 1, 1, 0, 0)), Error);
  // dy must have the pooled shape of x_shape.
  BOOST_CHECK_THROW(avg_pool2d_backward(Tensor::zeros({1, 2, 3, 2}, DType::f32), x.shape(), ok),
                    Error);
  const MaxPoolResult r = max_pool2d_forward(x, ok);
  BOOST_CHECK_THROW(max_pool2d_backward(r.y, r.y, x.shape()), Error);
  BOOST_CHECK_THROW(max_pool2d_backward(r.y, r.argmax, {1, 3, 4, 4}), Error);
  Tensor bad_index = r.argmax.clone();
  bad_index.data<std::int32_t>()[1] = 16;
  BOOST_CHECK_THROW(max_pool2d_backward(r.y, bad_index, x.shape()), Error);
}

BOOST_AUTO_TEST_SUITE_END()
