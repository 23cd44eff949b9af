#include "core/ops/batch_norm2d.h"

#include <cmath>
#include <vector>

#include "core/ops/cpu/float_buffer.h"
#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/batch_norm2d.h"
#include "core/ops/cuda/batch_norm2d_nhwc.h"
#endif

namespace alloy {

namespace {

cpu::BatchNormGeometry check_input(const char* op, const Tensor& x, Layout layout) {
  check_floating(op, "x", x);
  check_rank(op, "x", x, 4);
  const Nchw sizes = nchw_sizes(x.shape(), layout, op);
  return {sizes.n, sizes.c, sizes.h * sizes.w};
}

// A per-channel tensor: [C], f32 or x's dtype.
void check_channel_tensor(const char* op, const char* what, const Tensor& tensor, const Tensor& x,
                          const cpu::BatchNormGeometry& g) {
  ALLOY_CHECK(tensor.defined(), op, ": ", what, " is an undefined tensor");
  ALLOY_CHECK(tensor.dtype() == DType::f32 || tensor.dtype() == x.dtype(), op, ": ", what,
              " must be f32 or x's dtype ", dtype_name(x.dtype()), ", got ", tensor.str());
  check_shape(op, what, tensor, {g.channels});
}

// A CPU tensor's twin in the other layout (`to`): [N, C, H, W] to [N, H, W, C] or back.
Tensor transposed(const Tensor& t, Layout to, MemoryCategory category) {
  const Shape& s = t.shape();
  const bool to_nhwc = to == Layout::nhwc;
  Tensor out =
      Tensor::empty(to_nhwc ? Shape{s[0], s[2], s[3], s[1]} : Shape{s[0], s[3], s[1], s[2]},
                    t.dtype(), t.device(), category);
  const std::int64_t plane = to_nhwc ? s[2] * s[3] : s[1] * s[2];
  const std::int64_t channels = to_nhwc ? s[1] : s[3];
  cpu::batch_norm2d_transpose(t.raw(), out.raw(), dtype_size(t.dtype()), s[0],
                              to_nhwc ? channels : plane, to_nhwc ? plane : channels);
  return out;
}

Tensor to_nchw(const Tensor& t) {
  return transposed(t, Layout::nchw, MemoryCategory::workspace);
}

Tensor channel_tensor(std::int64_t channels, Device device) {
  return Tensor::empty({channels}, DType::f32, device, MemoryCategory::activations);
}

// scale = weight * invstd and shift = bias - mean * scale, so y = x * scale + shift
// (the same rearrangement PyTorch's CPU kernel uses).
void affine(const Tensor& x, const Tensor& weight, const Tensor& bias, const float* mean,
            const float* invstd, bool relu, Tensor& y, const cpu::BatchNormGeometry& g) {
  const cpu::FloatInput w(weight);
  const cpu::FloatInput b(bias);
  std::vector<float> scale(static_cast<std::size_t>(g.channels));
  std::vector<float> shift(scale.size());
  for (std::size_t c = 0; c < scale.size(); ++c) {
    scale[c] = w.data()[c] * invstd[c];
    shift[c] = b.data()[c] - mean[c] * scale[c];
  }
  cpu::batch_norm2d_affine(x.raw(), y.raw(), x.dtype(), g, scale.data(), shift.data(), relu);
}

#ifdef ALLOY_HAVE_CUDA
cuda::ChannelData channel_data(const Tensor& tensor) {
  return {tensor.raw(), tensor.dtype()};
}

Tensor channel_scratch(std::int64_t channels, Device device) {
  return Tensor::empty({2 * channels}, DType::f32, device, MemoryCategory::workspace);
}
#endif

}  // namespace

BatchNormTrainResult batch_norm2d_train_forward(const Tensor& x, const Tensor& weight,
                                                const Tensor& bias, Tensor& running_mean,
                                                Tensor& running_var,
                                                const BatchNormParams& params) {
  constexpr const char* op = "batch_norm2d_train_forward";
  const Device device = common_device(op, {&x, &weight, &bias, &running_mean, &running_var});
  const cpu::BatchNormGeometry g = check_input(op, x, params.layout);
  check_channel_tensor(op, "weight", weight, x, g);
  check_channel_tensor(op, "bias", bias, x, g);
  check_channel_tensor(op, "running_mean", running_mean, x, g);
  check_channel_tensor(op, "running_var", running_var, x, g);
  const std::int64_t count = g.batch * g.plane;
  ALLOY_CHECK(count > 1, op, ": training needs more than one value per channel, got ", x.str());
  BatchNormTrainResult result;
  result.saved.mean = channel_tensor(g.channels, device);
  result.saved.invstd = channel_tensor(g.channels, device);
  result.saved.layout = params.layout;
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      result.y = Tensor::empty(x.shape(), x.dtype(), device, MemoryCategory::activations);
      Tensor scratch = channel_scratch(g.channels, device);
      const auto forward = params.layout == Layout::nhwc ? cuda::batch_norm2d_nhwc_train_forward
                                                         : cuda::batch_norm2d_train_forward;
      forward(x.raw(), x.dtype(), g, channel_data(weight), channel_data(bias),
              channel_data(running_mean), channel_data(running_var), params,
              result.saved.mean.data<float>(), result.saved.invstd.data<float>(),
              scratch.data<float>(), result.y.raw(), cuda::stream_of(device));
      return result;
    });
  if (params.layout == Layout::nhwc) {
    BatchNormParams nchw = params;
    nchw.layout = Layout::nchw;
    BatchNormTrainResult twin =
        batch_norm2d_train_forward(to_nchw(x), weight, bias, running_mean, running_var, nchw);
    twin.y = transposed(twin.y, Layout::nhwc, MemoryCategory::activations);
    twin.saved.layout = Layout::nhwc;
    return twin;
  }
  float* mean = result.saved.mean.data<float>();
  float* invstd = result.saved.invstd.data<float>();
  std::vector<float> variance(static_cast<std::size_t>(g.channels));
  cpu::batch_norm2d_statistics(x.raw(), x.dtype(), g, mean, variance.data());
  for (std::int64_t c = 0; c < g.channels; ++c) {
    invstd[c] = 1.0f / std::sqrt(variance[static_cast<std::size_t>(c)] + params.eps);
  }

  result.y = Tensor::empty(x.shape(), x.dtype(), device, MemoryCategory::activations);
  affine(x, weight, bias, mean, invstd, params.relu, result.y, g);

  if (!params.update_running_statistics) return result;
  cpu::FloatOutput run_mean(running_mean, true);
  cpu::FloatOutput run_var(running_var, true);
  const float keep = 1.0f - params.momentum;
  const float unbias = static_cast<float>(count) / static_cast<float>(count - 1);
  for (std::int64_t c = 0; c < g.channels; ++c) {
    const float unbiased = variance[static_cast<std::size_t>(c)] * unbias;
    run_mean.data()[c] = keep * run_mean.data()[c] + params.momentum * mean[c];
    run_var.data()[c] = keep * run_var.data()[c] + params.momentum * unbiased;
  }
  run_mean.commit();
  run_var.commit();
  return result;
}

Tensor batch_norm2d_eval_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                 const Tensor& running_mean, const Tensor& running_var,
                                 const BatchNormParams& params) {
  constexpr const char* op = "batch_norm2d_eval_forward";
  const Device device = common_device(op, {&x, &weight, &bias, &running_mean, &running_var});
  const cpu::BatchNormGeometry g = check_input(op, x, params.layout);
  check_channel_tensor(op, "weight", weight, x, g);
  check_channel_tensor(op, "bias", bias, x, g);
  check_channel_tensor(op, "running_mean", running_mean, x, g);
  check_channel_tensor(op, "running_var", running_var, x, g);
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      Tensor y = Tensor::empty(x.shape(), x.dtype(), device, MemoryCategory::activations);
      Tensor scratch = channel_scratch(g.channels, device);
      const auto forward = params.layout == Layout::nhwc ? cuda::batch_norm2d_nhwc_eval_forward
                                                         : cuda::batch_norm2d_eval_forward;
      forward(x.raw(), x.dtype(), g, channel_data(weight), channel_data(bias),
              channel_data(running_mean), channel_data(running_var), params, scratch.data<float>(),
              y.raw(), cuda::stream_of(device));
      return y;
    });
  if (params.layout == Layout::nhwc) {
    BatchNormParams nchw = params;
    nchw.layout = Layout::nchw;
    return transposed(
        batch_norm2d_eval_forward(to_nchw(x), weight, bias, running_mean, running_var, nchw),
        Layout::nhwc, MemoryCategory::activations);
  }

  const cpu::FloatInput mean(running_mean);
  const cpu::FloatInput var(running_var);
  std::vector<float> invstd(static_cast<std::size_t>(g.channels));
  for (std::size_t c = 0; c < invstd.size(); ++c) {
    invstd[c] = 1.0f / std::sqrt(var.data()[c] + params.eps);
  }
  Tensor y = Tensor::empty(x.shape(), x.dtype(), device, MemoryCategory::activations);
  affine(x, weight, bias, mean.data(), invstd.data(), params.relu, y, g);
  return y;
}

Tensor batch_norm2d_backward(const Tensor& x, const Tensor& weight, const Tensor& dy,
                             const BatchNormSaved& saved, Tensor& dweight, Tensor& dbias,
                             const Tensor& relu_output) {
  constexpr const char* op = "batch_norm2d_backward";
  const Device device =
      common_device(op, {&x, &weight, &dy, &saved.mean, &saved.invstd, &dweight, &dbias});
  const cpu::BatchNormGeometry g = check_input(op, x, saved.layout);
  check_floating(op, "dy", dy);
  check_shape(op, "dy", dy, x.shape());
  cpu::ReluMask mask;
  if (relu_output.defined()) {
    common_device(op, {&x, &relu_output});
    check_floating(op, "relu_output", relu_output);
    check_shape(op, "relu_output", relu_output, x.shape());
    mask = {relu_output.raw(), relu_output.dtype()};
  }
  check_channel_tensor(op, "weight", weight, x, g);
  check_channel_tensor(op, "dweight", dweight, x, g);
  check_channel_tensor(op, "dbias", dbias, x, g);
  ALLOY_CHECK(saved.mean.defined() && saved.invstd.defined(), op,
              ": saved statistics are undefined (was the training forward run?)");
  check_dtype(op, "saved mean", saved.mean, DType::f32);
  check_dtype(op, "saved invstd", saved.invstd, DType::f32);
  check_shape(op, "saved mean", saved.mean, {g.channels});
  check_shape(op, "saved invstd", saved.invstd, {g.channels});
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      Tensor dx = Tensor::empty(x.shape(), x.dtype(), device, MemoryCategory::activations);
      Tensor scratch = channel_scratch(g.channels, device);
      const auto backward = saved.layout == Layout::nhwc ? cuda::batch_norm2d_nhwc_backward
                                                         : cuda::batch_norm2d_backward;
      backward(x.raw(), x.dtype(), dy.raw(), dy.dtype(), mask, g, channel_data(weight),
               saved.mean.data<float>(), saved.invstd.data<float>(), channel_data(dweight),
               channel_data(dbias), scratch.data<float>(), dx.raw(), cuda::stream_of(device));
      return dx;
    });
  if (saved.layout == Layout::nhwc) {
    BatchNormSaved nchw = saved;
    nchw.layout = Layout::nchw;
    const Tensor dx =
        batch_norm2d_backward(to_nchw(x), weight, to_nchw(dy), nchw, dweight, dbias,
                              relu_output.defined() ? to_nchw(relu_output) : Tensor());
    return transposed(dx, Layout::nhwc, MemoryCategory::activations);
  }

  const float* mean = saved.mean.data<float>();
  const float* invstd = saved.invstd.data<float>();
  std::vector<float> sum_dy(static_cast<std::size_t>(g.channels));
  std::vector<float> sum_dy_xmu(sum_dy.size());
  cpu::batch_norm2d_backward_reduce(x.raw(), x.dtype(), dy.raw(), dy.dtype(), mask, g, mean,
                                    sum_dy.data(), sum_dy_xmu.data());

  cpu::FloatOutput dw(dweight, true);
  cpu::FloatOutput db(dbias, true);
  for (std::size_t c = 0; c < sum_dy.size(); ++c) {
    dw.data()[c] += sum_dy_xmu[c] * invstd[c];
    db.data()[c] += sum_dy[c];
  }
  dw.commit();
  db.commit();

  const cpu::FloatInput w(weight);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), device, MemoryCategory::activations);
  cpu::batch_norm2d_backward_dx(x.raw(), x.dtype(), dy.raw(), dy.dtype(), mask, dx.raw(), g, mean,
                                invstd, w.data(), sum_dy.data(), sum_dy_xmu.data());
  return dx;
}

}  // namespace alloy
