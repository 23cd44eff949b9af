// The Winograd F(2x2, 5x5) convolution (core/ops/cpu/conv2d_winograd_5x5.h) against a float64
// convolution from the definition, in f32, f16 and bf16: LeNet's second layer, partial blocks of
// 16 images (3; 17: one full block and one of a single image; 50: a thread's partial block
// after its full one), odd and even output planes
// (partial last tiles), every padding up to 4 and unequal ones, with and without a bias; the
// backward's dw, db (accumulated) and dx the same way; each rerun gives equal bits; and which
// geometries it takes.
#include "core/ops/cpu/conv2d_winograd_5x5.h"

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "tests/support/winograd_cases.h"

using namespace alloy;
using namespace alloy::cpu;
using alloy::test::random_floats;

namespace {

using Case = test::WinogradCase;

const Case kCases[] = {
    {"LeNet's second layer, 3 images", 3, 20, 13, 13, 50, 0, 0, true},
    {"17 images: a full block and one of 1", 17, 16, 9, 8, 16, 0, 0, false},
    {"padding 2, even plane", 2, 17, 8, 10, 18, 2, 2, true},
    {"padding 4, unequal", 2, 16, 6, 7, 16, 4, 1, false},
    {"padding 1, 1x1 output", 1, 16, 3, 3, 17, 1, 1, true},
    // 4 blocks over 2 threads: the second thread's partial block follows its full one, whose
    // images its unused lanes still hold.
    {"50 images: a partial block after a full one", 50, 16, 7, 7, 16, 0, 0, true},
};

Conv2dGeometry geometry(const Case& c) {
  return test::winograd_geometry(c, 5);
}

// y and the sum of |products| of each output, in float64 from the definition.
void reference(const Conv2dGeometry& g, const std::vector<double>& x, const std::vector<float>& w,
               const std::vector<float>& b, std::vector<double>& y, std::vector<double>& scale) {
  const std::size_t outputs = static_cast<std::size_t>(g.batch) * g.filters * g.out_h * g.out_w;
  y.assign(outputs, 0.0);
  scale.assign(outputs, 0.0);
  std::size_t at = 0;
  for (int n = 0; n < g.batch; ++n)
    for (int k = 0; k < g.filters; ++k)
      for (int p = 0; p < g.out_h; ++p)
        for (int q = 0; q < g.out_w; ++q, ++at) {
          double sum = b.empty() ? 0.0 : b[static_cast<std::size_t>(k)];
          double magnitude = std::abs(sum);
          for (int c = 0; c < g.channels; ++c)
            for (int r = 0; r < 5; ++r)
              for (int s = 0; s < 5; ++s) {
                const int h = p - g.params.pad_h + r, v = q - g.params.pad_w + s;
                if (h < 0 || h >= g.height || v < 0 || v >= g.width) continue;
                const double product =
                    x[((static_cast<std::size_t>(n) * g.channels + c) * g.height + h) * g.width +
                      v] *
                    w[((static_cast<std::size_t>(k) * g.channels + c) * 5 + r) * 5 + s];
                sum += product;
                magnitude += std::abs(product);
              }
          y[at] = sum;
          scale[at] = magnitude;
        }
}

// Error allowed, relative to an output's sum of |products|: the transforms scale inputs by up
// to 5 and 2/3 before multiplying; fp32 measured under 1e-6 of the magnitude; a half output
// adds its own rounding (2^-11 or 2^-8 of the value).
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4e-6;
    case DType::f16:
      return 1e-3;
    default:
      return 8e-3;
  }
}

template <class Actual>
void check_close(const std::string& what, const std::vector<double>& expected,
                 const std::vector<double>& scale, const std::vector<Actual>& actual, double tol) {
  test::check_relative_to_scale(what, expected, scale, actual, tol);
}

// The gradients in float64 from the definition, each with its sum of |products|.
struct Gradients {
  std::vector<double> dw, dw_scale, db, db_scale, dx, dx_scale;
};

Gradients reference_gradients(const Conv2dGeometry& g, const std::vector<float>& x,
                              const std::vector<float>& w, const std::vector<float>& dy) {
  Gradients r;
  r.dw.assign(w.size(), 0.0);
  r.dw_scale.assign(w.size(), 0.0);
  r.db.assign(static_cast<std::size_t>(g.filters), 0.0);
  r.db_scale.assign(static_cast<std::size_t>(g.filters), 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dx_scale.assign(x.size(), 0.0);
  std::size_t at = 0;
  for (int n = 0; n < g.batch; ++n)
    for (int k = 0; k < g.filters; ++k)
      for (int p = 0; p < g.out_h; ++p)
        for (int q = 0; q < g.out_w; ++q, ++at) {
          const double grad = dy[at];
          r.db[static_cast<std::size_t>(k)] += grad;
          r.db_scale[static_cast<std::size_t>(k)] += std::abs(grad);
          for (int c = 0; c < g.channels; ++c)
            for (int i = 0; i < 5; ++i)
              for (int j = 0; j < 5; ++j) {
                const int h = p - g.params.pad_h + i, v = q - g.params.pad_w + j;
                if (h < 0 || h >= g.height || v < 0 || v >= g.width) continue;
                const std::size_t xi =
                    ((static_cast<std::size_t>(n) * g.channels + c) * g.height + h) * g.width + v;
                const std::size_t wi =
                    ((static_cast<std::size_t>(k) * g.channels + c) * 5 + i) * 5 + j;
                r.dw[wi] += grad * x[xi];
                r.dw_scale[wi] += std::abs(grad * x[xi]);
                r.dx[xi] += grad * w[wi];
                r.dx_scale[xi] += std::abs(grad * w[wi]);
              }
        }
  // dw's transform mixes a (filter, channel) pair's 25 taps: a tap that only ever meets padding
  // gets the others' rounding, so each tap's error is measured against its pair's largest scale.
  for (std::size_t pair = 0; pair < r.dw.size() / 25; ++pair) {
    const auto first = r.dw_scale.begin() + static_cast<std::ptrdiff_t>(25 * pair);
    std::fill(first, first + 25, *std::max_element(first, first + 25));
  }
  return r;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(conv2d_winograd_5x5)

BOOST_AUTO_TEST_CASE(forward_matches_the_definition_and_repeats_bit_for_bit) {
  std::mt19937 random(51);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const Case& c : kCases) {
      const Conv2dGeometry g = geometry(c);
      const std::string what = std::string(c.name) + " " + dtype_name(dtype);
      BOOST_REQUIRE_MESSAGE(winograd_5x5_supports(g), what);
      const Shape x_shape = {c.batch, c.channels, c.height, c.width};
      const Tensor x = Tensor::from_floats(
          x_shape, random_floats(static_cast<std::size_t>(shape_numel(x_shape)), random), dtype);
      const std::vector<float> w =
          random_floats(static_cast<std::size_t>(c.filters) * c.channels * 25, random);
      const std::vector<float> b = c.bias
                                       ? random_floats(static_cast<std::size_t>(c.filters), random)
                                       : std::vector<float>();
      const std::vector<float> x_stored = x.to_floats();
      std::vector<double> expected, scale;
      reference(g, std::vector<double>(x_stored.begin(), x_stored.end()), w, b, expected, scale);

      const Shape y_shape = {c.batch, c.filters, g.out_h, g.out_w};
      Tensor y = Tensor::zeros(y_shape, dtype);
      conv2d_winograd_5x5_forward(g, x.raw(), w.data(), c.bias ? b.data() : nullptr, y.raw(),
                                  dtype);
      const std::vector<float> actual = y.to_floats();
      check_close(what, expected, scale, actual, tolerance(dtype));
      Tensor again = Tensor::zeros(y_shape, dtype);
      conv2d_winograd_5x5_forward(g, x.raw(), w.data(), c.bias ? b.data() : nullptr, again.raw(),
                                  dtype);
      BOOST_TEST(again.to_floats() == actual, what << ": run twice");
    }
  }
}

// dw and db accumulate (a second call adds the same gradient again), dx is overwritten; db and
// dx may be absent.
BOOST_AUTO_TEST_CASE(backward_matches_the_definition_and_repeats_bit_for_bit) {
  // 2 threads whatever the machine, so that the 50-image case's second thread runs two blocks;
  // the pool's size is restored however the case ends.
  struct Threads {
    int saved = cpu_threads();
    Threads() { set_cpu_threads(2); }
    ~Threads() { set_cpu_threads(saved); }
  } const two_threads;
  std::mt19937 random(52);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const Case& c : kCases) {
      const Conv2dGeometry g = geometry(c);
      const std::string what = std::string(c.name) + " " + dtype_name(dtype);
      const Shape x_shape = {c.batch, c.channels, c.height, c.width};
      const Shape y_shape = {c.batch, c.filters, g.out_h, g.out_w};
      const Tensor x = Tensor::from_floats(
          x_shape, random_floats(static_cast<std::size_t>(shape_numel(x_shape)), random), dtype);
      const Tensor dy = Tensor::from_floats(
          y_shape, random_floats(static_cast<std::size_t>(shape_numel(y_shape)), random), dtype);
      const std::vector<float> w =
          random_floats(static_cast<std::size_t>(c.filters) * c.channels * 25, random);
      const Gradients expected = reference_gradients(g, x.to_floats(), w, dy.to_floats());

      const bool with_db = c.bias;
      std::vector<float> dw(w.size(), 0.0f), db(static_cast<std::size_t>(c.filters), 0.0f);
      Tensor dx = Tensor::zeros(x_shape, dtype);
      conv2d_winograd_5x5_backward(g, x.raw(), w.data(), dy.raw(), dw.data(),
                                   with_db ? db.data() : nullptr, dx.raw(), dtype);
      // The gradients sum fp32 transforms of the storage values: fp32's tolerance, whatever the
      // dtype; dx is then rounded to it.
      check_close(what + " dw", expected.dw, expected.dw_scale, dw, tolerance(DType::f32));
      if (with_db) check_close(what + " db", expected.db, expected.db_scale, db, 1e-6);
      check_close(what + " dx", expected.dx, expected.dx_scale, dx.to_floats(), tolerance(dtype));

      // Again, into the same dw and db, without dx: the same gradients added a second time.
      const std::vector<float> dw_once = dw, db_once = db;
      conv2d_winograd_5x5_backward(g, x.raw(), w.data(), dy.raw(), dw.data(),
                                   with_db ? db.data() : nullptr, nullptr, dtype);
      for (std::size_t i = 0; i < dw.size(); ++i) {
        if (dw[i] != dw_once[i] + dw_once[i]) {
          BOOST_TEST(dw[i] == dw_once[i] + dw_once[i], what << ": dw[" << i << "] added twice");
          break;
        }
      }
      if (with_db) {
        for (std::size_t k = 0; k < db.size(); ++k)
          BOOST_TEST(db[k] == db_once[k] + db_once[k], what << ": db[" << k << "] added twice");
      }
      Tensor dx_again = Tensor::zeros(x_shape, dtype);
      std::vector<float> dw_scratch(w.size(), 0.0f);
      conv2d_winograd_5x5_backward(g, x.raw(), w.data(), dy.raw(), dw_scratch.data(), nullptr,
                                   dx_again.raw(), dtype);
      BOOST_TEST(dx_again.to_floats() == dx.to_floats(), what << ": dx run twice");
      BOOST_TEST(dw_scratch == dw_once, what << ": dw run twice");
    }
  }
}

BOOST_AUTO_TEST_CASE(takes_5x5_stride_1_and_prefers_wide_layers) {
  Conv2dGeometry g = geometry(kCases[0]);
  BOOST_TEST(winograd_5x5_supports(g));
  BOOST_TEST(winograd_5x5_preferred(g));
  g.channels = 1;  // a 1-channel stem: im2col
  BOOST_TEST(winograd_5x5_supports(g));
  BOOST_TEST(!winograd_5x5_preferred(g));
  g.channels = 20;
  g.filters = 15;
  BOOST_TEST(!winograd_5x5_preferred(g));
  g.filters = 50;
  g.params.stride_w = 2;
  BOOST_TEST(!winograd_5x5_supports(g));
  g.params.stride_w = 1;
  g.kernel_h = g.kernel_w = 3;
  BOOST_TEST(!winograd_5x5_supports(g));
  g.kernel_h = g.kernel_w = 5;
  g.params.pad_h = 5;
  BOOST_TEST(!winograd_5x5_supports(g));
}

BOOST_AUTO_TEST_SUITE_END()
