// Checks of a device's causal self-attention against the CPU's
// (tests/core/ops/attention*_gpu_test). f32 matches the CPU to fp32 rounding. Half kernels may
// round the probabilities and score gradients to the half type before their products (the CPU keeps
// them fp32), so their error grows with the sum of |terms|, not with the result, which may cancel:
// y is checked against the half type's tolerance times sum_j p_tj |v_j| (the forward of qkv with
// |v|), dqkv against it times the largest |element| of each of dq, dk and dv.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/ops/attention.h"
#include "tests/support/gpu.h"

namespace alloy::test {

// qkv with its v columns made positive: the forward gives sum_j p_tj |v_j|, same p.
inline Tensor with_abs_values(const Tensor& qkv, std::int64_t width) {
  std::vector<float> values = qkv.to_floats();
  for (std::size_t i = 0; i < values.size(); ++i)
    if (static_cast<std::int64_t>(i) % (3 * width) >= 2 * width) values[i] = std::fabs(values[i]);
  return Tensor::from_floats(qkv.shape(), values);
}

// Each element of dqkv replaced by the largest |element| of its part (dq, dk or dv).
inline Tensor part_maxima(const Tensor& dqkv, std::int64_t width) {
  std::vector<float> values = dqkv.to_floats();
  float largest[3] = {0.0f, 0.0f, 0.0f};
  for (std::size_t i = 0; i < values.size(); ++i) {
    float& part = largest[static_cast<std::int64_t>(i) % (3 * width) / width];
    part = std::max(part, std::fabs(values[i]));
  }
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = largest[static_cast<std::int64_t>(i) % (3 * width) / width];
  return Tensor::from_floats(dqkv.shape(), values);
}

// The device's y (from qkv) and dqkv (from the CPU's y and lse) against the CPU's.
inline void check_against_cpu(const Tensor& y, const Tensor& dqkv, const Tensor& cpu_y,
                              const Tensor& cpu_dqkv, const Tensor& qkv, std::int64_t heads,
                              const AttentionDropout* dropout, const std::string& what) {
  const DType dtype = qkv.dtype();
  const double tolerance = gpu_tolerance(dtype);
  if (dtype == DType::f32) {
    check_gpu_close(y, cpu_y, "y " + what, tolerance, 1e-5);
    check_gpu_close(dqkv, cpu_dqkv, "dqkv " + what, tolerance, 1e-4);
    return;
  }
  const std::int64_t width = qkv.dim(2) / 3;
  const Tensor magnitude = attention_forward(with_abs_values(qkv, width), heads, true, dropout).y;
  check_gpu_close_to_magnitude(y, cpu_y, magnitude, "y " + what, tolerance, 1e-5, tolerance);
  check_gpu_close_to_magnitude(dqkv, cpu_dqkv, part_maxima(cpu_dqkv, width), "dqkv " + what,
                               tolerance, 1e-4, tolerance);
}

}  // namespace alloy::test
