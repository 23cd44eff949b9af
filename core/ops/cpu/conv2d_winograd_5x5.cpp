#include "core/ops/cpu/conv2d_winograd_5x5.h"

#include "core/ops/cpu/conv2d_winograd.h"
#include "core/ops/cpu/conv2d_winograd_lanes.h"
#include "core/thread_pool.h"

namespace alloy::cpu {

namespace {

// The Toom-Cook matrices of F(2, 5) at the points 0, 1, -1, 2, -2 and infinity: A^T evaluates
// the 2 outputs, G the filter (scaled by the points' Lagrange denominators), and B^T is the
// unique matrix that then makes A^T [(G g) .* (B^T d)] the correlation of d and g (derived in
// exact rational arithmetic; conv2d_winograd_5x5_test checks the results against float64).
struct F2x5 {
  static constexpr int kTaps = 5;
  static constexpr int kWindow = 6;  // a tile's input window, and its transform: 6x6 points
  static constexpr float kBT[kWindow][kWindow] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0},
                                                  {0, 4, -4, -1, 1, 0}, {0, -2, -1, 2, 1, 0},
                                                  {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
  static constexpr double kG[kWindow][kTaps] = {{1.0 / 4, 0, 0, 0, 0},
                                                {-1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6},
                                                {-1.0 / 6, 1.0 / 6, -1.0 / 6, 1.0 / 6, -1.0 / 6},
                                                {1.0 / 24, 1.0 / 12, 1.0 / 6, 1.0 / 3, 2.0 / 3},
                                                {1.0 / 24, -1.0 / 12, 1.0 / 6, -1.0 / 3, 2.0 / 3},
                                                {0, 0, 0, 0, 1}};
  static constexpr float kAT[2][kWindow] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 1}};
};

}  // namespace

bool winograd_5x5_supports(const Conv2dGeometry& g) {
  const Conv2dParams& p = g.params;
  return g.kernel_h == F2x5::kTaps && g.kernel_w == F2x5::kTaps && p.stride_h == 1 &&
         p.stride_w == 1 && p.pad_h <= F2x5::kTaps - 1 && p.pad_w <= F2x5::kTaps - 1 &&
         g.out_h > 0 && g.out_w > 0;
}

bool winograd_5x5_preferred(const Conv2dGeometry& g) {
  // Below 16 channels or filters the transforms cost as much as the multiplies they save.
  return winograd_5x5_supports(g) && g.channels >= 16 && g.filters >= 16;
}

void conv2d_winograd_5x5_forward(const Conv2dGeometry& g, const void* x, const float* w,
                                 const float* b, void* y, DType dtype) {
  winograd_lanes::forward<F2x5>(g, x, w, b, y, dtype);
}

void conv2d_winograd_5x5_backward(const Conv2dGeometry& g, const void* x, const float* w,
                                  const void* dy, float* dw, float* db, void* dx, DType dtype) {
  constexpr int kPoints = F2x5::kWindow * F2x5::kWindow;
  winograd_lanes::backward<F2x5>(
      g, x, w, dy, dw, db, dx, dtype,
      winograd_lanes::accumulator_groups(g, kPoints, cpu_threads(), kWinogradAccumulatorBudget));
}

}  // namespace alloy::cpu
