#include "core/ops/optimizer_update.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/parallel.h"
#include "core/stochastic_rounding.h"

namespace alloy::cpu {

namespace {

// Half parameters and gradients are widened a block at a time through stack scratch.
constexpr std::int64_t kBlock = 1024;

// Stores `count` updated values p of a half parameter from element `offset` on, rounded
// stochastically with the words of (key, step, tensor.index, element).
void store_stochastic(const float* p, const UpdateBuffers& tensor, std::int64_t offset,
                      std::int64_t count, const StochasticRounding& rounding, std::int64_t step) {
  auto* out = static_cast<std::uint16_t*>(tensor.param) + offset;
  const bool bf16 = tensor.param_dtype == DType::bf16;
  for (std::int64_t i = 0; i < count; ++i) {
    const std::uint32_t word =
        stochastic_rounding_word(rounding.key, static_cast<std::uint32_t>(step), tensor.index,
                                 static_cast<std::uint64_t>(offset + i));
    out[i] = bf16 ? float_to_bf16_bits_stochastic(p[i], word)
                  : float_to_half_bits_stochastic(p[i], word);
  }
}

// Calls body(tensor, offset, count, p, g) for consecutive blocks of every tensor, p the block's
// parameters as fp32 (rounded back into a half parameter after the call, to nearest or with
// `rounding` at `step`, and into the model copy if there is one) and g its widened gradient. The
// elements of all tensors form one range split over the thread pool: one fork per step however many
// tensors there are. Updates are elementwise, so results do not depend on the split.
template <class Body>
void for_parameter_blocks(const std::vector<UpdateBuffers>& tensors,
                          const StochasticRounding& rounding, std::int64_t step, const Body& body) {
  std::vector<std::int64_t> start(tensors.size() + 1, 0);
  for (std::size_t t = 0; t < tensors.size(); ++t)
    start[t + 1] = start[t] + tensors[t].count;
  parallel_ranges(start.back(), 4, [&](std::int64_t begin, std::int64_t end) {
    std::array<float, kBlock> param_scratch;
    std::array<float, kBlock> grad_scratch;
    // The first tensor with elements at or after `begin`.
    std::size_t t = static_cast<std::size_t>(std::upper_bound(start.begin(), start.end(), begin) -
                                             start.begin() - 1);
    for (; t < tensors.size() && start[t] < end; ++t) {
      const UpdateBuffers& tensor = tensors[t];
      const std::int64_t last = std::min(end, start[t + 1]) - start[t];
      for (std::int64_t offset = std::max(begin, start[t]) - start[t]; offset < last;
           offset += kBlock) {
        const std::int64_t count = std::min(kBlock, last - offset);
        float* p = output_floats(tensor.param, tensor.param_dtype, offset, param_scratch.data());
        if (tensor.param_dtype != DType::f32) {
          load_floats(tensor.param, tensor.param_dtype, offset, count, p);
        }
        const float* g =
            load_floats(tensor.grad, tensor.grad_dtype, offset, count, grad_scratch.data());
        body(tensor, offset, count, p, g);
        if (rounding.enabled && tensor.param_dtype != DType::f32) {
          store_stochastic(p, tensor, offset, count, rounding, step);
        } else {
          store_floats(p, tensor.param, tensor.param_dtype, offset, count);
        }
        if (tensor.copy != nullptr) {
          store_floats(p, tensor.copy, tensor.copy_dtype, offset, count);
        }
      }
    }
  });
}

// AdamW's scalars for one step.
struct AdamWScalars {
  float step_size, correction2_sqrt, decay, one_minus_beta1, one_minus_beta2, beta2, eps, unscale,
      grad_factor, grad_scale;
};

// One block's update, vectorised: the scalars by value and the arrays restricted, so that no
// store can alias a scalar, and sqrt without errno (this file builds with -fno-math-errno, see
// CMakeLists.txt); it was a scalar loop at 4% of a small GPT's step. The same bits either way.
void adamw_elements(std::int64_t count, float* __restrict p, const float* __restrict g,
                    float* __restrict m, float* __restrict v, const AdamWScalars s) {
  for (std::int64_t i = 0; i < count; ++i) {
    const float gi = g[i] * s.unscale * s.grad_factor * s.grad_scale;
    m[i] += s.one_minus_beta1 * (gi - m[i]);
    v[i] = s.beta2 * v[i] + s.one_minus_beta2 * gi * gi;
    const float denom = std::sqrt(v[i]) / s.correction2_sqrt + s.eps;
    p[i] = p[i] * s.decay - s.step_size * (m[i] / denom);
  }
}

}  // namespace

// The gradient times each factor is an operand of a multiply, never of an add, so each product
// is rounded on its own (no fused multiply-add takes it): the update sees
// fl(fl(g * unscale) * factor) as if the gradient had been multiplied in place by each
// beforehand, and g itself when both are 1.
void sgd_update(const std::vector<UpdateBuffers>& tensors, const SgdHyper& h, float lr,
                std::int64_t step, GradFactors factors) {
  const float unscale = factors.unscale, grad_factor = factors.factor;
  const auto update = [&](const UpdateBuffers& tensor, std::int64_t offset, std::int64_t count,
                          float* p, const float* g) {
    if (h.momentum == 0.0f) {
      for (std::int64_t i = 0; i < count; ++i) {
        const float d = g[i] * unscale * grad_factor * h.grad_scale + h.weight_decay * p[i];
        p[i] -= lr * d;
      }
      return;
    }
    float* buf = tensor.state[0] + offset;
    for (std::int64_t i = 0; i < count; ++i) {
      const float d = g[i] * unscale * grad_factor * h.grad_scale + h.weight_decay * p[i];
      buf[i] = h.momentum * buf[i] + d;
      const float change = h.nesterov ? d + h.momentum * buf[i] : buf[i];
      p[i] -= lr * change;
    }
  };
  for_parameter_blocks(tensors, h.rounding, step, update);
}

void adamw_update(const std::vector<UpdateBuffers>& tensors, const AdamWHyper& h, float lr,
                  std::int64_t step, GradFactors factors) {
  const float unscale = factors.unscale, grad_factor = factors.factor;
  // The per-step scalars in double, as PyTorch computes them on the host.
  const double correction1 = 1.0 - std::pow(static_cast<double>(h.beta1), step);
  const double correction2 = 1.0 - std::pow(static_cast<double>(h.beta2), step);
  AdamWScalars s;
  s.step_size = static_cast<float>(lr / correction1);
  s.correction2_sqrt = static_cast<float>(std::sqrt(correction2));
  s.decay = 1.0f - lr * h.weight_decay;
  s.one_minus_beta1 = 1.0f - h.beta1;
  s.one_minus_beta2 = 1.0f - h.beta2;
  s.beta2 = h.beta2;
  s.eps = h.eps;
  s.unscale = unscale;
  s.grad_factor = grad_factor;
  s.grad_scale = h.grad_scale;
  const auto update = [&s](const UpdateBuffers& tensor, std::int64_t offset, std::int64_t count,
                           float* p, const float* g) {
    adamw_elements(count, p, g, tensor.state[0] + offset, tensor.state[1] + offset, s);
  };
  for_parameter_blocks(tensors, h.rounding, step, update);
}

}  // namespace alloy::cpu
