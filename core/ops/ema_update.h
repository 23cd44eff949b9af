// The exponential moving average of weights (timm's ModelEmaV2, torch.optim.swa_utils with an
// EMA averaging function) as one fused pass over a list of tensors: on CUDA one multi-tensor
// launch per 64 tensors, on the CPU one fork over the thread pool.
//
// Arithmetic, the same bits on the CPU and on CUDA and at any CPU thread count: with
// one_minus_decay = 1.0f - decay rounded once on the host in float, and v the value widened to
// float (exact from f16 and bf16), each element becomes
//   average = fma(decay, average, fl(one_minus_decay * v))
// the product rounded on its own, then one fused multiply-add (one rounding). Both sides spell the
// fma out rather than leave a * b + c to the compilers, whose contraction (GCC's default
// -ffp-contract=fast for C++, nvcc's --fmad) may fuse either product. The CPU calls std::fma: a
// call, so no contraction fuses the product into it; under -march=native (ALLOY_NATIVE, the
// default) on a CPU with FMA it is a vfmadd instruction in the vectorized loop. A build without
// -mfma (ALLOY_NATIVE=OFF) would call libm's fmaf per element, several times slower, so it picks an
// AVX2+FMA copy of the loop at run time where the CPU has one; fma rounds once in every form, so
// neither choice changes a bit. CUDA calls __fmul_rn (never contracted) and __fmaf_rn. Elements are
// independent, so how the work is split changes nothing. decay 0 gives the value itself for a
// finite average (a zero's sign aside).
//
// decay is a kernel argument: a captured CUDA graph replays the value it was captured with, so
// a caller whose decay changes with the step (timm's warm-up) needs a new capture for it. skip,
// like the optimizers' found_inf (core/ops/optimizer_update.h), is read where it lives, so
// a step the loss scaler skipped leaves the average alone without the host waiting.
#pragma once

#include <cstdint>
#include <vector>

#include "core/host_device.h"
#include "core/tensor.h"

namespace alloy {

// The decay of an update with warm-up, TensorFlow's ExponentialMovingAverage(num_updates):
// min(decay, (1 + updates) / (10 + updates)), `updates` counting the updates applied so far,
// this one included. The first updates move the average most of the way to the weights, so it
// does not carry the initial weights for thousands of steps. IEEE float arithmetic (the integer
// is exact in a float below 2^24), the same bits on the CPU and in the CUDA kernel.
ALLOY_HOST_DEVICE inline float warmed_up_decay(float decay, std::int32_t updates) {
  const float count = static_cast<float>(updates);
  const float ramp = (1.0f + count) / (10.0f + count);
  return ramp < decay ? ramp : decay;
}

// One averaged tensor and the tensor it follows: average is f32; value is f32, f16 or bf16 with
// the average's shape and device.
struct EmaTensors {
  Tensor* average;
  const Tensor* value;
};

// For each pair, element by element in fp32:  average = decay * average + (1 - decay) * value
// (value widened exactly from half), rounded as above. decay: in [0, 1). skip: f32 [1] on the
// device, or undefined; when defined and nonzero (NaN included) nothing changes (a step the loss
// scaler skipped). An empty list changes nothing. All tensors on one device. Throws
// alloy::Error naming the problem for a non-f32 average, mismatched shapes or devices,
// non-floating values, decay outside [0, 1).
// updates: i32 [N >= 1] on the device, or undefined; when defined, the update's decay is
// warmed_up_decay(decay, updates[0]) (the optimizer's step count, read where it lives like skip,
// so a graph replays the current count).
void ema_update(const std::vector<EmaTensors>& tensors, float decay, const Tensor& skip = {},
                const Tensor& updates = {});

// One pair as raw storage: what the CPU and CUDA kernels take.
struct EmaBuffers {
  float* average;
  const void* value;
  DType value_dtype;
  std::int64_t count;
};

namespace cpu {
// Every tensor has count > 0; decay in [0, 1).
void ema_update(const std::vector<EmaBuffers>& tensors, float decay);
}  // namespace cpu

}  // namespace alloy
