#include "core/ops/optimizer_update.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/parallel.h"

namespace alloy::cpu {

namespace {

// Half gradients are widened a block at a time through stack scratch.
constexpr std::int64_t kBlock = 1024;

// Calls body(offset, count, g) for consecutive blocks, g the block's widened gradient.
template <class Body>
void for_gradient_blocks(const void* grad, DType grad_dtype, std::int64_t total, const Body& body) {
  parallel_ranges(total, 4, [&](std::int64_t begin, std::int64_t end) {
    std::array<float, kBlock> scratch;
    for (std::int64_t offset = begin; offset < end; offset += kBlock) {
      const std::int64_t count = std::min(kBlock, end - offset);
      body(offset, count, load_floats(grad, grad_dtype, offset, count, scratch.data()));
    }
  });
}

}  // namespace

void sgd_update(float* param, const void* grad, DType grad_dtype, float* momentum_buffer,
                std::int64_t total, const SgdHyper& h, bool first_step) {
  const float damped = 1.0f - h.dampening;
  const auto update = [&](std::int64_t offset, std::int64_t count, const float* g) {
    float* p = param + offset;
    if (h.momentum == 0.0f) {
      for (std::int64_t i = 0; i < count; ++i) {
        const float d = g[i] * h.grad_scale + h.weight_decay * p[i];
        p[i] -= h.lr * d;
      }
      return;
    }
    float* buf = momentum_buffer + offset;
    for (std::int64_t i = 0; i < count; ++i) {
      const float d = g[i] * h.grad_scale + h.weight_decay * p[i];
      buf[i] = first_step ? d : h.momentum * buf[i] + damped * d;
      const float step = h.nesterov ? d + h.momentum * buf[i] : buf[i];
      p[i] -= h.lr * step;
    }
  };
  for_gradient_blocks(grad, grad_dtype, total, update);
}

void adamw_update(float* param, const void* grad, DType grad_dtype, float* exp_avg,
                  float* exp_avg_sq, std::int64_t total, const AdamWHyper& h, std::int64_t step) {
  // The per-step scalars in double, as PyTorch computes them on the host.
  const double correction1 = 1.0 - std::pow(static_cast<double>(h.beta1), step);
  const double correction2 = 1.0 - std::pow(static_cast<double>(h.beta2), step);
  const float step_size = static_cast<float>(h.lr / correction1);
  const float correction2_sqrt = static_cast<float>(std::sqrt(correction2));
  const float decay = 1.0f - h.lr * h.weight_decay;
  const float one_minus_beta1 = 1.0f - h.beta1;
  const float one_minus_beta2 = 1.0f - h.beta2;
  const auto update = [&](std::int64_t offset, std::int64_t count, const float* g) {
    float* p = param + offset;
    float* m = exp_avg + offset;
    float* v = exp_avg_sq + offset;
    for (std::int64_t i = 0; i < count; ++i) {
      const float gi = g[i] * h.grad_scale;
      m[i] += one_minus_beta1 * (gi - m[i]);
      v[i] = h.beta2 * v[i] + one_minus_beta2 * gi * gi;
      const float denom = std::sqrt(v[i]) / correction2_sqrt + h.eps;
      p[i] = p[i] * decay - step_size * (m[i] / denom);
    }
  };
  for_gradient_blocks(grad, grad_dtype, total, update);
}

}  // namespace alloy::cpu
