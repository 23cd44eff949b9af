// Support for the CPU Winograd tests (conv2d_winograd_test, conv2d_winograd_5x5_test): their
// cases, geometry, random inputs and the check of a result against a float64 one relative to
// each element's sum of |products| (the scale Winograd's rounding grows with).
#pragma once

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/ops/conv2d.h"

namespace alloy::test {

struct WinogradCase {
  const char* name;
  int batch, channels, height, width, filters, pad_h, pad_w;
  bool bias;
};

// A square `kernel` at stride 1 over the case's planes.
inline cpu::Conv2dGeometry winograd_geometry(const WinogradCase& c, int kernel) {
  cpu::Conv2dGeometry g{};
  g.batch = c.batch;
  g.channels = c.channels;
  g.height = c.height;
  g.width = c.width;
  g.filters = c.filters;
  g.kernel_h = g.kernel_w = kernel;
  g.params.pad_h = c.pad_h;
  g.params.pad_w = c.pad_w;
  g.out_h = c.height + 2 * c.pad_h - kernel + 1;
  g.out_w = c.width + 2 * c.pad_w - kernel + 1;
  return g;
}

inline std::vector<float> random_floats(std::size_t count, std::mt19937& random) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> out(count);
  for (float& v : out)
    v = uniform(random);
  return out;
}

// The largest error of `actual` against `expected`, relative to each element's `scale`, is at
// most `tol`; the message names the worst element.
template <class Actual>
void check_relative_to_scale(const std::string& what, const std::vector<double>& expected,
                             const std::vector<double>& scale, const std::vector<Actual>& actual,
                             double tol) {
  BOOST_TEST_REQUIRE(expected.size() == actual.size());
  double worst = 0.0;
  std::size_t worst_at = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double error = std::abs(actual[i] - expected[i]) / std::max(scale[i], 1e-30);
    if (!(error <= worst)) {
      worst = error;
      worst_at = i;
    }
  }
  BOOST_TEST(worst <= tol, what << ": element " << worst_at << " is " << actual[worst_at]
                                << ", expected " << expected[worst_at] << " (error " << worst
                                << " of its magnitude)");
}

}  // namespace alloy::test
