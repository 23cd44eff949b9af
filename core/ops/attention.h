// Causal multi-head self-attention over the fused q | k | v projection, as GPT-2's
// CausalSelfAttention without its output projection, and without ever holding a T x T matrix:
// flash attention's online softmax over blocks of keys, with fp32 statistics.
//
// qkv: [B, T, 3C] (one floating dtype), C = H * D; for head h, q_t = qkv[b, t, h*D : h*D + D],
// k_t the same columns + C, v_t + 2C. With s_tj = (q_t . k_j) * (1 / sqrt(D)) for j <= t:
//   y[b, t, h*D + d] = round(sum_j p_tj v_jd),   p_tj = exp(s_tj - lse_t),
//   lse_t = m_t + log(l_t) in fp32 (m_t the row's running max, l_t its running sum of exp),
// all arithmetic in fp32 from the widened inputs, y rounded once to qkv's dtype.
// Backward recomputes p from q, k and lse (flash attention 2):
//   delta_t = sum_d dy_td * y_td,  ds_tj = p_tj * (dy_t . v_j - delta_t),
//   dq_t = scale * sum_j ds_tj k_j,  dk_j = scale * sum_t ds_tj q_t,  dv_j = sum_t p_tj dy_t,
// rounded once into dqkv (qkv's dtype). Every sum runs in a fixed order (no atomics), so both
// backends are deterministic; they share the formulas but not the blocking, so they agree to
// fp32 rounding, not bit for bit.
//
// Dropout on the probabilities (GPT-2's attn_dropout), optional: with z_tj = scale for a kept
// and 0 for a dropped element, y_t = sum_j p_tj z_tj v_j (lse is the undropped softmax's), and
// backward uses dv_j = sum_t p_tj z_tj dy_t and ds_tj = p_tj (z_tj (dy_t . v_j) - delta_t). The
// mask is never stored: element (b, h, t, j) is decided as core/ops/dropout.h decides element
// (g, c) of a [rows, columns] tensor, with g = row_start + row_stride * b (the sequence's row in
// the global batch) and c = (h T + t) T + j, at the step count read on the device.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "core/ops/attention_kernel.h"
#include "core/ops/dropout.h"
#include "core/tensor.h"

namespace alloy {

struct AttentionDropout {
  DropoutMask mask;  // make_dropout_mask's
  Tensor step;       // the optimizer's i32 [2] step count, on qkv's device
};

// What the kernels take: the mask and where the step count is (null: no dropout).
struct AttentionDropoutBits {
  std::uint64_t key = 0;
  std::uint32_t threshold = 0;
  float scale = 1.0f;
  std::int64_t row_start = 0, row_stride = 1;
  const std::int32_t* step = nullptr;
};

// z for element (b, h, t, j) of a [B, H, T, T] probability tensor at `step`.
ALLOY_HOST_DEVICE inline float attention_keep_factor(const AttentionDropoutBits& d,
                                                     std::uint32_t step, std::int64_t b,
                                                     std::int64_t h, std::int64_t t, std::int64_t j,
                                                     std::int64_t time) {
  const auto g = static_cast<std::uint32_t>(d.row_start + d.row_stride * b);
  const std::int64_t column = (h * time + t) * time + j;
  const Philox4x32 bits = dropout_bits(d.key, step, g, static_cast<std::uint32_t>(column >> 2));
  return bits.v[column & 3] < d.threshold ? 0.0f : d.scale;
}

struct AttentionGeometry {
  std::int64_t batch = 0, time = 0, heads = 0, head_dim = 0;
};

struct AttentionResult {
  Tensor y;    // [B, T, C] in qkv's dtype
  Tensor lse;  // f32 [B, H, T]: each query row's log-sum-exp, for backward; undefined unless saved
};

// The kernel attention of `dtype` and geometry `g` runs on `device` under the process's
// --attention-kernel setting (core/ops/attention_kernel.h): alloy or cudnn, the same for a
// forward and the backward after it. `dropout`: the probabilities get dropout. An explicit cudnn
// that cannot run throws: a usage error for f32 or dropout, else an error with cuDNN's reason.
AttentionKernel attention_kernel_used(Device device, DType dtype, const AttentionGeometry& g,
                                      bool dropout);

// save_lse: keep the row statistics for backward (an evaluation forward does not). dropout:
// null for none.
AttentionResult attention_forward(const Tensor& qkv, std::int64_t heads, bool save_lse = true,
                                  const AttentionDropout* dropout = nullptr);

// dy: [B, T, C] in qkv's dtype; y and lse from the forward of qkv, with the same dropout.
// Returns dqkv [B, T, 3C].
Tensor attention_backward(const Tensor& dy, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                          std::int64_t heads, const AttentionDropout* dropout = nullptr);

namespace cpu {
// lse may be null. Blocks of 64 query rows by 64 keys in fp32 scratch per head, their products
// GEMMs on the calling thread; heads split over the pool.
void attention_forward(const void* qkv, DType dtype, const AttentionGeometry& g, void* y,
                       float* lse, const AttentionDropoutBits& dropout);
void attention_backward(const void* dy, const void* qkv, const void* y, const float* lse,
                        DType dtype, const AttentionGeometry& g, void* dqkv,
                        const AttentionDropoutBits& dropout);
}  // namespace cpu

}  // namespace alloy
