#include "core/ops/attention.h"

#include "core/ops/dispatch.h"
#include "core/setting_error.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/attention.h"
#include "core/ops/cuda/attention_cudnn.h"
#endif

namespace alloy {

namespace {

AttentionGeometry check_qkv(const char* op, const Tensor& qkv, std::int64_t heads) {
  check_floating(op, "qkv", qkv);
  check_rank(op, "qkv", qkv, 3);
  ALLOY_CHECK(heads > 0, op, ": heads must be positive, got ", heads);
  const std::int64_t width = qkv.dim(2);
  ALLOY_CHECK(width % (3 * heads) == 0 && width > 0, op, ": qkv ", qkv.str(),
              " must hold q, k and v of ", heads, " heads each (last dimension 3 * heads * D)");
  AttentionGeometry g;
  g.batch = qkv.dim(0);
  g.time = qkv.dim(1);
  g.heads = heads;
  g.head_dim = width / (3 * heads);
  return g;
}

AttentionDropoutBits dropout_bits_of(const char* op, const AttentionDropout* dropout,
                                     const AttentionGeometry& g) {
  AttentionDropoutBits bits;
  if (dropout == nullptr || dropout->mask.threshold == 0) return bits;
  check_dtype(op, "dropout step", dropout->step, DType::i32);
  const DropoutMask& m = dropout->mask;
  ALLOY_CHECK(m.row_start + m.row_stride * g.batch <= (std::int64_t{1} << 32) &&
                  g.heads * g.time * g.time <= (std::int64_t{1} << 34),
              op, ": the dropout mask's rows or columns exceed its counter");
  bits.key = m.key;
  bits.threshold = m.threshold;
  bits.scale = m.scale;
  bits.row_start = m.row_start;
  bits.row_stride = m.row_stride;
  bits.step = dropout->step.data<std::int32_t>();
  return bits;
}

bool runs_cudnn(Device device, DType dtype, const AttentionGeometry& g,
                const AttentionDropoutBits& bits) {
  return device.is_cuda() &&
         attention_kernel_used(device, dtype, g, bits.threshold != 0) == AttentionKernel::cudnn;
}

}  // namespace

AttentionKernel attention_kernel_used(Device device, DType dtype, const AttentionGeometry& g,
                                      bool dropout) {
  const AttentionKernel setting = attention_kernel();
  if (!device.is_cuda() || setting == AttentionKernel::alloy) return AttentionKernel::alloy;
  const bool explicit_cudnn = setting == AttentionKernel::cudnn;
  if (dtype == DType::f32) {
    if (explicit_cudnn) {
      setting_fail(
          "{attention_kernel} cudnn runs f16 and bf16 attention; fp32 runs Alloy's "
          "kernel (use auto or alloy)");
    }
    return AttentionKernel::alloy;
  }
  if (dropout) {
    if (explicit_cudnn) {
      setting_fail(
          "{attention_kernel} cudnn cannot drop out attention probabilities: cuDNN's "
          "random numbers are not Alloy's masks (use auto or alloy, or no attention "
          "dropout)");
    }
    return AttentionKernel::alloy;
  }
#ifdef ALLOY_HAVE_CUDA
  const std::string why = cuda::cudnn_attention_unsupported(device, dtype, g);
  if (why.empty()) return AttentionKernel::cudnn;
  if (explicit_cudnn) setting_failure("{attention_kernel} cudnn: ", why);
#endif
  return AttentionKernel::alloy;
}

AttentionResult attention_forward(const Tensor& qkv, std::int64_t heads, bool save_lse,
                                  const AttentionDropout* dropout) {
  constexpr const char* op = "attention_forward";
  const Device device = common_device(op, {&qkv, dropout != nullptr ? &dropout->step : nullptr});
  const AttentionGeometry g = check_qkv(op, qkv, heads);
  const AttentionDropoutBits bits = dropout_bits_of(op, dropout, g);
  AttentionResult result;
  result.y = Tensor::empty({g.batch, g.time, g.heads * g.head_dim}, qkv.dtype(), device,
                           MemoryCategory::activations);
  if (save_lse) {
    result.lse =
        Tensor::empty({g.batch, g.heads, g.time}, DType::f32, device, MemoryCategory::activations);
  }
  float* lse = save_lse ? result.lse.data<float>() : nullptr;
  if (runs_cudnn(device, qkv.dtype(), g, bits)) {
    ALLOY_CUDA_PATH(op, device, {
      // cuDNN's one forward graph writes the statistics: scratch ones when not kept.
      const Tensor scratch = save_lse ? Tensor()
                                      : Tensor::empty({g.batch, g.heads, g.time}, DType::f32,
                                                      device, MemoryCategory::workspace);
      cuda::cudnn_attention_forward(device, qkv.raw(), qkv.dtype(), g, result.y.raw(),
                                    save_lse ? lse : scratch.data<float>());
    });
    return result;
  }
  ALLOY_RUN_KERNEL(op, device, attention_forward, qkv.raw(), qkv.dtype(), g, result.y.raw(), lse,
                   bits);
  return result;
}

Tensor attention_backward(const Tensor& dy, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                          std::int64_t heads, const AttentionDropout* dropout) {
  constexpr const char* op = "attention_backward";
  const Device device =
      common_device(op, {&dy, &qkv, &y, &lse, dropout != nullptr ? &dropout->step : nullptr});
  const AttentionGeometry g = check_qkv(op, qkv, heads);
  const AttentionDropoutBits bits = dropout_bits_of(op, dropout, g);
  const Shape out_shape = {g.batch, g.time, g.heads * g.head_dim};
  check_dtype(op, "dy", dy, qkv.dtype());
  check_dtype(op, "y", y, qkv.dtype());
  check_shape(op, "dy", dy, out_shape);
  check_shape(op, "y", y, out_shape);
  ALLOY_CHECK(lse.defined(), op, ": lse is undefined (was the forward asked to save it?)");
  check_dtype(op, "lse", lse, DType::f32);
  check_shape(op, "lse", lse, {g.batch, g.heads, g.time});
  Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype(), device, MemoryCategory::activations);
  if (runs_cudnn(device, qkv.dtype(), g, bits)) {
    ALLOY_CUDA_PATH(op, device, {
      cuda::cudnn_attention_backward(device, dy.raw(), qkv.raw(), y.raw(), lse.data<float>(),
                                     qkv.dtype(), g, dqkv.raw());
    });
    return dqkv;
  }
  ALLOY_RUN_KERNEL(op, device, attention_backward, dy.raw(), qkv.raw(), y.raw(), lse.data<float>(),
                   qkv.dtype(), g, dqkv.raw(), bits);
  return dqkv;
}

}  // namespace alloy
