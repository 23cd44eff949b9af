#include "core/ops/cpu/conv2d_winograd.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/thread_pool.h"
#include "tests/support/winograd_cases.h"

using namespace alloy;
using namespace alloy::cpu;
using alloy::test::random_floats;

namespace {

using Case = test::WinogradCase;
// Odd and even planes (partial last tiles), planes smaller than a tile, all three paddings, a
// batch below and one above the suite's two threads, and one large enough for several blocks.
// Planes at most 8 wide take the images-in-lanes kernels (conv2d_winograd_lanes.h), wider ones
// the plane kernels; the last two cases group several 16-image blocks into one GEMM, partial
// blocks and groups included.
const Case kCases[] = {
    {"odd plane", 3, 5, 7, 6, 4, 1, 1, true},
    {"no padding", 2, 3, 4, 5, 2, 0, 0, false},
    {"1x1 plane", 5, 2, 1, 1, 3, 1, 1, true},
    {"padding 2, wide", 2, 4, 5, 9, 6, 2, 2, false},
    {"mixed padding", 1, 16, 7, 7, 16, 1, 0, true},
    {"several blocks", 9, 24, 14, 14, 20, 1, 1, false},
    {"37 images on 4x4 planes: 3 blocks, grouped", 37, 16, 4, 4, 16, 1, 1, true},
    {"20 images on 7x7 planes: a full block and a partial one", 20, 16, 7, 7, 17, 1, 1, false},
};

Conv2dGeometry geometry(const Case& c) {
  return test::winograd_geometry(c, 3);
}

// Values of one dtype: `stored` is what the kernels read, `values` the same numbers as doubles.
struct Array {
  Array(std::size_t count, DType dtype, std::mt19937& random) : dtype(dtype), values(count) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    bytes.resize(count * dtype_size(dtype));
    for (std::size_t i = 0; i < count; ++i)
      set(i, uniform(random));
  }
  void set(std::size_t i, float value) {
    if (dtype == DType::f32) {
      std::memcpy(bytes.data() + 4 * i, &value, 4);
      values[i] = value;
      return;
    }
    const std::uint16_t bits =
        dtype == DType::f16 ? float_to_half_bits(value) : float_to_bf16_bits(value);
    std::memcpy(bytes.data() + 2 * i, &bits, 2);
    values[i] = dtype == DType::f16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
  }
  double get(std::size_t i) const {
    if (dtype == DType::f32) {
      float value;
      std::memcpy(&value, bytes.data() + 4 * i, 4);
      return value;
    }
    std::uint16_t bits;
    std::memcpy(&bits, bytes.data() + 2 * i, 2);
    return dtype == DType::f16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
  }
  void* data() { return bytes.data(); }

  DType dtype;
  std::vector<double> values;
  std::vector<unsigned char> bytes;
};

// Element counts of a geometry's x, y (and dy) and w.
struct Counts {
  explicit Counts(const Conv2dGeometry& g)
      : x(static_cast<std::size_t>(g.batch) * g.channels * g.height * g.width),
        y(static_cast<std::size_t>(g.batch) * g.filters * g.out_h * g.out_w),
        w(static_cast<std::size_t>(g.filters) * g.channels * 9) {}
  std::size_t x, y, w;
};

// Random fp32 x, dy and w for a geometry.
struct Inputs {
  Inputs(const Conv2dGeometry& g, unsigned seed) : counts(g) {
    std::mt19937 random(seed);
    x = random_floats(counts.x, random);
    dy = random_floats(counts.y, random);
    w = random_floats(counts.w, random);
  }
  Counts counts;
  std::vector<float> x, dy, w;
};

// The convolution and its gradients in float64, straight from the definition, each with the
// sum of the absolute values of its products (the scale its rounding error is measured in).
struct Reference {
  explicit Reference(const Conv2dGeometry& g) : g(g) {}

  std::size_t x_at(int n, int c, int h, int w) const {
    return ((static_cast<std::size_t>(n) * g.channels + c) * g.height + h) * g.width + w;
  }
  std::size_t y_at(int n, int k, int p, int q) const {
    return ((static_cast<std::size_t>(n) * g.filters + k) * g.out_h + p) * g.out_w + q;
  }
  std::size_t w_at(int k, int c, int r, int s) const {
    return ((static_cast<std::size_t>(k) * g.channels + c) * 3 + r) * 3 + s;
  }

  // Calls visit(x index, y index, w index) for every product of the convolution.
  template <class Visit>
  void products(Visit visit) const {
    for (int n = 0; n < g.batch; ++n)
      for (int k = 0; k < g.filters; ++k)
        for (int p = 0; p < g.out_h; ++p)
          for (int q = 0; q < g.out_w; ++q)
            for (int c = 0; c < g.channels; ++c)
              for (int r = 0; r < 3; ++r)
                for (int s = 0; s < 3; ++s) {
                  const int h = p - g.params.pad_h + r, w = q - g.params.pad_w + s;
                  if (h < 0 || h >= g.height || w < 0 || w >= g.width) continue;
                  visit(x_at(n, c, h, w), y_at(n, k, p, q), w_at(k, c, r, s));
                }
  }

  const Conv2dGeometry& g;
};

double tolerance(DType dtype) {
  // Winograd's transforms add before they multiply: a few ulps of the largest summand in fp32;
  // a half output adds its own rounding (2^-11 or 2^-8 of the value).
  switch (dtype) {
    case DType::f32:
      return 2e-6;
    case DType::f16:
      return 2e-3;
    default:
      return 1.6e-2;
  }
}

void check_close(const std::string& what, const std::vector<double>& expected,
                 const std::vector<double>& scale, const std::vector<double>& actual, double tol) {
  test::check_relative_to_scale(what, expected, scale, actual, tol);
}

const DType kTypes[] = {DType::f32, DType::f16, DType::bf16};

}  // namespace

BOOST_AUTO_TEST_CASE(supports_3x3_stride_1_and_prefers_wide_layers) {
  Conv2dGeometry g = geometry({"resnet stage", 2, 64, 28, 28, 64, 1, 1, false});
  BOOST_TEST(winograd_supports(g));
  BOOST_TEST(winograd_preferred(g));
  g.channels = 1;  // resnet18's first layer: im2col
  BOOST_TEST(winograd_supports(g));
  BOOST_TEST(!winograd_preferred(g));
  g.channels = 64;
  g.params.stride_h = 2;
  BOOST_TEST(!winograd_supports(g));
  g.params.stride_h = 1;
  g.kernel_h = g.kernel_w = 5;  // LeNet
  BOOST_TEST(!winograd_supports(g));
  g.kernel_h = g.kernel_w = 3;
  g.params.pad_w = 3;
  BOOST_TEST(!winograd_supports(g));
}

BOOST_AUTO_TEST_CASE(forward_matches_float64) {
  for (const Case& c : kCases) {
    for (const DType dtype : kTypes) {
      const std::string what = std::string(c.name) + " " + dtype_name(dtype);
      const Conv2dGeometry g = geometry(c);
      const Reference ref(g);
      const Counts counts(g);
      const std::size_t y_count = counts.y;
      std::mt19937 random(7);
      Array x(counts.x, dtype, random);
      const std::vector<float> w = random_floats(counts.w, random);
      const std::vector<float> b = random_floats(g.filters, random);
      std::vector<double> expected(y_count, 0.0), scale(y_count, 0.0);
      ref.products([&](std::size_t xi, std::size_t yi, std::size_t wi) {
        expected[yi] += x.values[xi] * w[wi];
        scale[yi] += std::abs(x.values[xi] * w[wi]);
      });
      for (std::size_t i = 0; i < y_count; ++i) {
        const double bias = c.bias ? b[(i / (g.out_h * g.out_w)) % g.filters] : 0.0;
        expected[i] += bias;
        scale[i] += std::abs(bias) + std::abs(expected[i]);
      }
      Array y(y_count, dtype, random);
      conv2d_winograd_forward(g, x.data(), w.data(), c.bias ? b.data() : nullptr, y.data(), dtype);
      std::vector<double> actual(y_count);
      for (std::size_t i = 0; i < y_count; ++i)
        actual[i] = y.get(i);
      check_close(what + " y", expected, scale, actual, tolerance(dtype));
    }
  }
}

BOOST_AUTO_TEST_CASE(backward_matches_float64) {
  for (const Case& c : kCases) {
    for (const DType dtype : kTypes) {
      const std::string what = std::string(c.name) + " " + dtype_name(dtype);
      const Conv2dGeometry g = geometry(c);
      const Reference ref(g);
      std::mt19937 random(11);
      const Counts counts(g);
      const std::size_t x_count = counts.x, y_count = counts.y, w_count = counts.w;
      Array x(x_count, dtype, random);
      Array dy(y_count, dtype, random);
      const std::vector<float> w = random_floats(w_count, random);
      // dw and db accumulate: start them from values, not zeros.
      std::vector<float> dw = random_floats(w_count, random);
      std::vector<float> db = random_floats(g.filters, random);
      std::vector<double> dw_expected(dw.begin(), dw.end()), dw_scale(w_count);
      std::vector<double> dx_expected(x_count, 0.0), dx_scale(x_count, 0.0);
      for (std::size_t i = 0; i < w_count; ++i)
        dw_scale[i] = std::abs(dw[i]);
      ref.products([&](std::size_t xi, std::size_t yi, std::size_t wi) {
        dw_expected[wi] += dy.values[yi] * x.values[xi];
        dw_scale[wi] += std::abs(dy.values[yi] * x.values[xi]);
        dx_expected[xi] += dy.values[yi] * w[wi];
        dx_scale[xi] += std::abs(dy.values[yi] * w[wi]);
      });
      std::vector<double> db_expected(db.begin(), db.end()), db_scale(g.filters);
      for (int k = 0; k < g.filters; ++k)
        db_scale[k] = std::abs(db[k]);
      for (std::size_t i = 0; i < y_count; ++i) {
        const std::size_t k = (i / (g.out_h * g.out_w)) % g.filters;
        db_expected[k] += dy.values[i];
        db_scale[k] += std::abs(dy.values[i]);
      }
      for (std::size_t i = 0; i < x_count; ++i)
        dx_scale[i] += std::abs(dx_expected[i]);
      Array dx(x_count, dtype, random);
      conv2d_winograd_backward(g, x.data(), w.data(), dy.data(), dw.data(),
                               c.bias ? db.data() : nullptr, dx.data(), dtype);
      // The weight gradients are fp32 sums whatever the storage dtype.
      check_close(what + " dw", dw_expected, dw_scale, std::vector<double>(dw.begin(), dw.end()),
                  tolerance(DType::f32));
      if (c.bias) {
        check_close(what + " db", db_expected, db_scale, std::vector<double>(db.begin(), db.end()),
                    tolerance(DType::f32));
      }
      std::vector<double> dx_actual(x_count);
      for (std::size_t i = 0; i < x_count; ++i)
        dx_actual[i] = dx.get(i);
      check_close(what + " dx", dx_expected, dx_scale, dx_actual, tolerance(dtype));
    }
  }
}

BOOST_AUTO_TEST_CASE(weights_only_backward_leaves_dx_alone) {
  const Conv2dGeometry g = geometry(kCases[0]);
  const Inputs in(g, 3);
  const std::vector<float>& x = in.x;
  const std::vector<float>& dy = in.dy;
  const std::vector<float>& w = in.w;
  const std::size_t x_count = in.counts.x, w_count = in.counts.w;
  std::vector<float> with_dx(w_count, 0.0f), without_dx(w_count, 0.0f), dx(x_count);
  conv2d_winograd_backward(g, x.data(), w.data(), dy.data(), with_dx.data(), nullptr, dx.data(),
                           DType::f32);
  // As for a network's first layer: no dx, and no weights needed for it.
  conv2d_winograd_backward(g, x.data(), nullptr, dy.data(), without_dx.data(), nullptr, nullptr,
                           DType::f32);
  BOOST_TEST(with_dx == without_dx);
}

BOOST_AUTO_TEST_CASE(results_repeat_bit_for_bit_at_each_thread_count) {
  const Conv2dGeometry g = geometry(kCases[5]);
  const Inputs in(g, 5);
  const std::vector<float>& x = in.x;
  const std::vector<float>& dy = in.dy;
  const std::vector<float>& w = in.w;
  const std::size_t x_count = in.counts.x, y_count = in.counts.y, w_count = in.counts.w;
  const int threads = cpu_threads();
  for (const int count : {1, 3}) {
    set_cpu_threads(count);
    std::vector<float> runs[2][3];
    for (auto& run : runs) {
      run[0].resize(y_count);
      run[1].assign(w_count, 0.0f);
      run[2].resize(x_count);
      conv2d_winograd_forward(g, x.data(), w.data(), nullptr, run[0].data(), DType::f32);
      conv2d_winograd_backward(g, x.data(), w.data(), dy.data(), run[1].data(), nullptr,
                               run[2].data(), DType::f32);
    }
    for (int i = 0; i < 3; ++i)
      BOOST_TEST((runs[0][i] == runs[1][i]), count << " threads, output " << i);
  }
  set_cpu_threads(threads);
}

BOOST_AUTO_TEST_CASE(weight_gradient_accumulators_stay_within_their_budget) {
  const Conv2dGeometry g = geometry(kCases[5]);
  const std::int64_t accumulator = (16 * g.filters * g.channels + g.filters) * 4;
  BOOST_TEST(winograd_accumulators(g, 3, 100 * accumulator) == 3);
  BOOST_TEST(winograd_accumulators(g, 3, 2 * accumulator + 1) == 2);
  BOOST_TEST(winograd_accumulators(g, 3, accumulator - 1) == 1);  // never none

  // One accumulator for three threads: one thread does the pass, and gets the same gradients
  // (to rounding), repeatably.
  const Inputs in(g, 13);
  const int threads = cpu_threads();
  set_cpu_threads(3);
  std::vector<float> dw_each(in.counts.w, 0.0f), dw_one(in.counts.w, 0.0f), dw_again(dw_one);
  std::vector<float> db_each(g.filters, 0.0f), db_one(g.filters, 0.0f), db_again(db_one);
  std::vector<float> dx_each(in.counts.x), dx_one(in.counts.x), dx_again(in.counts.x);
  conv2d_winograd_backward(g, in.x.data(), in.w.data(), in.dy.data(), dw_each.data(),
                           db_each.data(), dx_each.data(), DType::f32);
  conv2d_winograd_backward(g, in.x.data(), in.w.data(), in.dy.data(), dw_one.data(), db_one.data(),
                           dx_one.data(), DType::f32, accumulator);
  conv2d_winograd_backward(g, in.x.data(), in.w.data(), in.dy.data(), dw_again.data(),
                           db_again.data(), dx_again.data(), DType::f32, accumulator);
  set_cpu_threads(threads);
  BOOST_TEST((dw_one == dw_again && db_one == db_again && dx_one == dx_again));
  const auto close = [](const std::vector<float>& a, const std::vector<float>& b) {
    double largest = 0.0, worst = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      largest = std::max(largest, static_cast<double>(std::abs(a[i])));
      worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
    }
    return worst <= 1e-5 * largest;
  };
  BOOST_TEST(close(dw_each, dw_one));
  BOOST_TEST(close(db_each, db_one));
  BOOST_TEST(close(dx_each, dx_one));
}
