// Inverted dropout (PyTorch's nn.Dropout in training): each element is dropped with probability
// p and the kept ones are scaled by 1 / (1 - p). No mask is stored: the mask is a pure function
// of where an element is, so backward draws it again from the same counters (dropout holds no
// activation memory), and a block recomputed in backward (`--recompute`) draws the same mask.
//
// Why the masks do not depend on how a batch is split. Element (row i, column c) of x, seen as
// [rows, columns] (the first dimension, the rest flattened), is decided by
//   bits = word c % 4 of philox4x32_10(counter (c / 4, g, step, 0), key)   (core/philox.h)
//   g    = row_start + row_stride * i: the example's row in the GLOBAL batch. A data-parallel
//          rank r of W holding local rows f .. of its micro-batch has g = r + W * (f + i)
//          (its batch holds global positions r + W * j, parallel/distributed_sampler.h); one
//          process has g = f + i. Gradient accumulation and data parallelism thus give every
//          example the mask it has in one pass over the global batch.
//   step = the optimizer's applied-step count, read on the device from its i32 [2] count
//          (core/optim/optimizer.h) when the kernel runs, so a CUDA graph replay draws the
//          current step's mask. A step the loss scaler skips does not advance it: the retried
//          step draws the same masks again, which is harmless.
//   key  = the layer's 64-bit key (k0 = low word, k1 = high word), drawn from the model's
//          Generator when the layer is built (nn::Dropout): the seed decides it.
// The element is dropped iff bits < threshold, threshold = the u32 nearest p * 2^32 (ties to
// even), so P(drop) = threshold / 2^32, within 2^-33 of p. CPU and CUDA compute the same bits.
//
// Values: y = fl(x * f) in fp32, rounded once to x's dtype, with f = scale for a kept element and
// 0 for a dropped one, scale = fl(1 / fl(1 - p)) in fp32. So kept values are fl(x * scale) and
// dropped ones are x * 0 (+0, -0 for negative x, NaN for inf or NaN x). That is the arithmetic
// of PyTorch's CUDA kernel (x * mask * scale in fp32, scale = (float)(1.0 / (float)(1 - p))),
// bit for bit in every dtype given the same mask and a p whose fl(1 - p) agrees; PyTorch's CPU
// kernel computes the scaled mask in the tensor's dtype, which for f16/bf16 rounds the scale to
// half first and can differ in the last bit. Its masks (another generator) differ, of course.
// Backward is the same map on dy: dx = fl(dy * f), rounded to dy's dtype.
#pragma once

#include <cstdint>

#include "core/philox.h"
#include "core/tensor.h"

namespace alloy {

// What decides a dropout mask besides the step count (which the kernels read on the device).
struct DropoutMask {
  std::uint64_t key = 0;
  std::uint32_t threshold = 0;  // drop iff bits < threshold
  float scale = 1.0f;           // a kept element's factor
  std::int64_t row_start = 0;   // global row of local row 0
  std::int64_t row_stride = 1;  // global rows between consecutive local rows
};

// A mask for probability p: threshold and scale as above. UsageError naming `who` unless
// 0 <= p < 1 (p = 1 would drop everything and scale by infinity: leave the branch out instead);
// Error unless row_start >= 0 and row_stride >= 1.
DropoutMask make_dropout_mask(const char* who, float p, std::uint64_t key, std::int64_t row_start,
                              std::int64_t row_stride);

// The random words deciding columns 4 * group .. 4 * group + 3 of global row g at `step`.
ALLOY_HOST_DEVICE inline Philox4x32 dropout_bits(std::uint64_t key, std::uint32_t step,
                                                 std::uint32_t g, std::uint32_t group) {
  return philox4x32_10({{group, g, step, 0u}}, static_cast<std::uint32_t>(key),
                       static_cast<std::uint32_t>(key >> 32));
}

// y = dropout of x ([rows, ...], rows = the first dimension; any floating dtype; y has x's).
// step: the optimizer's i32 [2] count on x's device. Global rows must stay below 2^32 and
// columns below 2^34 (the counter's words); Error otherwise.
Tensor dropout_forward(const Tensor& x, const DropoutMask& mask, const Tensor& step);
// dx = dy where the same mask keeps, times scale; 0 elsewhere. dy's dtype.
Tensor dropout_backward(const Tensor& dy, const DropoutMask& mask, const Tensor& step);

namespace cpu {
// out = in * (keep ? scale : 0), [rows, columns] contiguous, in and out of one dtype.
void dropout(const void* in, void* out, DType dtype, std::int64_t rows, std::int64_t columns,
             const DropoutMask& mask, const std::int32_t* step);
}  // namespace cpu

}  // namespace alloy
